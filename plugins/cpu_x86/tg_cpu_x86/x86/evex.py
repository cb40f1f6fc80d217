"""The AVX-512 (EVEX-encoded) instruction forms, as rows in forms.py's notation.

One table line makes a row per vector width (128, 256, 512 bits: the 128/256-bit rows are AVX512VL and reach
xmm16-31/ymm16-31, which VEX cannot encode), and, where the instruction takes a write mask, the same rows with
merge masking (`zmm1 {k1}`) and zero masking (`zmm1 {k1} {z}`). EVEX rows come after the VEX rows of a
mnemonic in FORMS, so registers 0-15 without a mask keep the shorter VEX encoding and a zmm operand, a
register above 15, a mask or a broadcast selects the EVEX one.

Columns: mnemonic, pp, opcode map, W, opcode [ /digit], operands, roles, tuple type, flags. In operands V is the
vector register of the row's width, VM vector or memory, VMB vector, memory or an element broadcast (FV rows
only), MEM memory only. Flags: "m" merge masking, "z" zero masking too, "-" none. A zero-masked row's mnemonic
has the suffix "{z}" (`emit("vmovups{z}", zmm0, k1, mem)`: lanes whose mask bit is clear become 0), printed
without it, as capstone does.
"""
from __future__ import annotations

_WIDTHS = (128, 256, 512)
_V = {128: "x", 256: "y", 512: "z"}

# packed float arithmetic, ps (W0) and pd (W1): full-vector tuple, broadcast allowed
_FLOAT = """
vaddps   NP 0F W0 58 V,V,VMB RVM FV mz   vaddpd   66 0F W1 58 V,V,VMB RVM FV mz
vsubps   NP 0F W0 5C V,V,VMB RVM FV mz   vsubpd   66 0F W1 5C V,V,VMB RVM FV mz
vmulps   NP 0F W0 59 V,V,VMB RVM FV mz   vmulpd   66 0F W1 59 V,V,VMB RVM FV mz
vdivps   NP 0F W0 5E V,V,VMB RVM FV mz   vdivpd   66 0F W1 5E V,V,VMB RVM FV mz
vminps   NP 0F W0 5D V,V,VMB RVM FV mz   vminpd   66 0F W1 5D V,V,VMB RVM FV mz
vmaxps   NP 0F W0 5F V,V,VMB RVM FV mz   vmaxpd   66 0F W1 5F V,V,VMB RVM FV mz
vsqrtps  NP 0F W0 51 V,VMB RM FV mz      vsqrtpd  66 0F W1 51 V,VMB RM FV mz
vandps   NP 0F W0 54 V,V,VMB RVM FV mz   vandnps  NP 0F W0 55 V,V,VMB RVM FV mz
vorps    NP 0F W0 56 V,V,VMB RVM FV mz   vxorps   NP 0F W0 57 V,V,VMB RVM FV mz
vunpcklps NP 0F W0 14 V,V,VMB RVM FV mz  vunpckhps NP 0F W0 15 V,V,VMB RVM FV mz
vblendmps 66 0F38 W0 65 V,V,VMB RVM FV mz  vblendmpd 66 0F38 W1 65 V,V,VMB RVM FV mz
vpermilps 66 0F38 W0 0C V,V,VMB RVM FV mz
vcvtdq2ps  NP 0F W0 5B V,VMB RM FV mz   vcvtps2dq 66 0F W0 5B V,VMB RM FV mz   vcvttps2dq F3 0F W0 5B V,VMB RM FV mz
"""
# with an immediate
_FLOAT_IMM = """
vshufps   NP 0F W0 C6 V,V,VMB,u8 RVMI FV mz
vpermilps 66 0F3A W0 04 V,VMB,u8 RMI FV mz
vrndscaleps 66 0F3A W0 08 V,VMB,u8 RMI FV mz
"""
# compares into an opmask: predicate immediates as vcmpps (capstone prints vcmp<pred>ps), 5 bits (p5: EVEX
# ignores imm8[7:5], so a larger immediate is refused rather than silently meaning another predicate)
_COMPARE = """
vcmpps   NP 0F W0 C2 k,V,VMB,p5 RVMI FV m    vcmppd 66 0F W1 C2 k,V,VMB,p5 RVMI FV m
vpcmpeqd 66 0F W0 76 k,V,VMB RVM FV m        vpcmpgtd 66 0F W0 66 k,V,VMB RVM FV m
"""
# moves: loads (merge or zero masking) and stores (merge masking only)
_MOVES = """
vmovups  NP 0F W0 10 V,VM RM FVM mz    vmovups  NP 0F W0 11 MEM,V MR FVM m
vmovaps  NP 0F W0 28 V,VM RM FVM mz    vmovaps  NP 0F W0 29 MEM,V MR FVM m
vmovdqu32 F3 0F W0 6F V,VM RM FVM mz   vmovdqu32 F3 0F W0 7F MEM,V MR FVM m
vmovdqa32 66 0F W0 6F V,VM RM FVM mz   vmovdqa32 66 0F W0 7F MEM,V MR FVM m
"""
# int32 lanes (and the 64-bit forms beside them)
_INT = """
vpaddd  66 0F W0 FE V,V,VMB RVM FV mz    vpaddq  66 0F W1 D4 V,V,VMB RVM FV mz
vpsubd  66 0F W0 FA V,V,VMB RVM FV mz    vpsubq  66 0F W1 FB V,V,VMB RVM FV mz
vpmulld 66 0F38 W0 40 V,V,VMB RVM FV mz  vpmuludq 66 0F W1 F4 V,V,VMB RVM FV mz
vpandd  66 0F W0 DB V,V,VMB RVM FV mz    vpandq  66 0F W1 DB V,V,VMB RVM FV mz
vpandnd 66 0F W0 DF V,V,VMB RVM FV mz    vpandnq 66 0F W1 DF V,V,VMB RVM FV mz
vpord   66 0F W0 EB V,V,VMB RVM FV mz    vporq   66 0F W1 EB V,V,VMB RVM FV mz
vpxord  66 0F W0 EF V,V,VMB RVM FV mz    vpxorq  66 0F W1 EF V,V,VMB RVM FV mz
vpminsd 66 0F38 W0 39 V,V,VMB RVM FV mz  vpmaxsd 66 0F38 W0 3D V,V,VMB RVM FV mz
vpminud 66 0F38 W0 3B V,V,VMB RVM FV mz  vpmaxud 66 0F38 W0 3F V,V,VMB RVM FV mz
vpsllvd 66 0F38 W0 47 V,V,VMB RVM FV mz  vpsrlvd 66 0F38 W0 45 V,V,VMB RVM FV mz
vpsravd 66 0F38 W0 46 V,V,VMB RVM FV mz
vpshufd 66 0F W0 70 V,VMB,u8 RMI FV mz
vpslld  66 0F W0 72/6 V,VMB,u8 VMI FV mz  vpsrld 66 0F W0 72/2 V,VMB,u8 VMI FV mz
vpsrad  66 0F W0 72/4 V,VMB,u8 VMI FV mz  vpsllq 66 0F W1 73/6 V,VMB,u8 VMI FV mz
vpsrlq  66 0F W1 73/2 V,VMB,u8 VMI FV mz
"""
# the fused multiply-adds: family base opcode per order (+0 132, +0x10 213, +0x20 231)
_FMA = (("vfmadd", 0x98), ("vfmsub", 0x9A), ("vfnmadd", 0x9C), ("vfnmsub", 0x9E))


def _rows_of(table: str) -> list[list[str]]:
    words = table.split()
    return [words[i:i + 9] for i in range(0, len(words), 9)]


def _expand(name: str, pp: str, mp: str, w: str, op: str, kinds: str, roles: str, tup: str, flags: str,
            widths: tuple[int, ...] = _WIDTHS) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    opcode, _, digit = op.partition("/")
    tail = f"/{digit}" if digit else "/r"
    if "u8" in kinds or "p5" in kinds:
        tail += " ib"
    elem = 64 if w == "W1" else 32
    for bits in widths:
        v = _V[bits]
        ks = [k.replace("VMB", f"{v}m{bits}b{elem}").replace("VM", f"{v}m{bits}").replace("MEM", f"m{bits}")
              .replace("V", v) for k in kinds.split(",")]
        enc = f"E.{bits}.{pp}.{mp}.{w} {opcode} {tail} {tup}"
        rows.append((name, " ".join(ks), enc, roles))
        masked = " ".join([ks[0], "wk", *ks[1:]])  # the write mask follows the destination (the first operand)
        if "m" in flags:
            rows.append((name, masked, enc, roles[0] + "K" + roles[1:]))
        if "z" in flags:
            rows.append((name + "{z}", masked, enc, roles[0] + "Z" + roles[1:], name))
    return rows


def evex_rows() -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for table in (_FLOAT, _FLOAT_IMM, _COMPARE, _MOVES, _INT):
        for name, pp, mp, w, op, kinds, roles, tup, flags in _rows_of(table):
            rows += _expand(name, pp, mp, w, op, kinds, roles, tup, flags)
    for fam, base in _FMA:
        for order, off in (("132", 0x00), ("213", 0x10), ("231", 0x20)):
            for t, w in (("ps", "W0"), ("pd", "W1")):
                rows += _expand(f"{fam}{order}{t}", "66", "0F38", w, f"{base + off:02X}", "V,V,VMB", "RVM", "FV", "mz")
    # broadcasts of one element (a register's lane 0 or memory) to every lane
    rows += _expand("vbroadcastss", "66", "0F38", "W0", "18", "V,xm32", "RM", "T1S", "mz")
    rows += _expand("vbroadcastsd", "66", "0F38", "W1", "19", "V,xm64", "RM", "T1S", "mz", widths=(256, 512))
    rows += _expand("vpbroadcastd", "66", "0F38", "W0", "58", "V,xm32", "RM", "T1S", "mz")
    rows += _expand("vpbroadcastd", "66", "0F38", "W0", "7C", "V,r32", "RM", "T1S", "mz")
    rows += _expand("vpbroadcastq", "66", "0F38", "W1", "59", "V,xm64", "RM", "T1S", "mz")
    # sign/zero extensions of bytes or words to dword lanes: the source is a quarter or half of the vector
    for name, op, part in (("vpmovsxbd", "21", 4), ("vpmovzxbd", "31", 4), ("vpmovsxwd", "23", 2),
                           ("vpmovzxwd", "33", 2)):
        for bits in _WIDTHS:
            src = f"{'xm' if bits // part <= 128 else 'ym'}{bits // part}"
            rows += _expand(name, "66", "0F38", "W0", op, f"V,{src}", "RM", "QVM" if part == 4 else "HVM", "mz",
                            widths=(bits,))
    # 256-bit and 128-bit parts of a zmm (horizontal reductions fold halves) and back
    rows += _expand("vextractf64x4", "66", "0F3A", "W1", "1B", "ym256,V,u8", "MRI", "T4", "-", widths=(512,))
    rows += _expand("vextractf32x8", "66", "0F3A", "W0", "1B", "ym256,V,u8", "MRI", "T8", "-", widths=(512,))
    rows += _expand("vextractf32x4", "66", "0F3A", "W0", "19", "xm128,V,u8", "MRI", "T4", "-", widths=(256, 512))
    rows += _expand("vinsertf64x4", "66", "0F3A", "W1", "1A", "V,V,ym256,u8", "RVMI", "T4", "-", widths=(512,))
    rows += _expand("vinsertf32x4", "66", "0F3A", "W0", "18", "V,V,xm128,u8", "RVMI", "T4", "-", widths=(256, 512))
    rows += _expand("vpermps", "66", "0F38", "W0", "16", "V,V,VMB", "RVM", "FV", "mz", widths=(256, 512))
    rows += _expand("vpermd", "66", "0F38", "W0", "36", "V,V,VMB", "RVM", "FV", "mz", widths=(256, 512))
    # opmask registers (VEX-encoded): moves to and from general registers and memory
    rows += [("kmovw", "k km16", "V.128.NP.0F.W0 90 /r", "RM"), ("kmovw", "m16 k", "V.128.NP.0F.W0 91 /r", "MR"),
             ("kmovw", "k r32", "V.128.NP.0F.W0 92 /r", "RM"), ("kmovw", "r32 k", "V.128.NP.0F.W0 93 /r", "RM"),
             ("kortestw", "k k", "V.128.NP.0F.W0 98 /r", "RM"), ("kxnorw", "k k k", "V.256.NP.0F.W0 46 /r", "RVM"),
             ("knotw", "k k", "V.128.NP.0F.W0 44 /r", "RM")]
    return rows

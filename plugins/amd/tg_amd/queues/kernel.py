"""A compiled kernel as a PM4 dispatch (pm4.Dispatch): its descriptor's RSRC words, LDS and scratch sizes, and
the user SGPR values the descriptor enables, in hardware order (amd.md 2.5)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from tg_amd.interface import USER_SGPR_FIELDS, KernelSymbol
from tg_amd.queues.pm4 import Dispatch, Word, hi, lds_granules, lo, tmpring_size

# the fields a user SGPR value is given for (the others stay zero: gfx11 has architected flat scratch)
ADDRESS_FIELDS = ("dispatch_ptr", "queue_ptr", "kernarg_segment_ptr", "dispatch_id")


def user_data(kernel: KernelSymbol, values: Mapping[str, Word]) -> list[Word]:
    """COMPUTE_USER_DATA_0..USER_SGPR_COUNT-1: each enabled field's words at its SGPR, zero elsewhere."""
    kd = kernel.descriptor
    out: list[Word] = [0] * kd.user_sgpr_count
    for name, at in kd.user_sgprs.items():
        count = USER_SGPR_FIELDS[name][1]
        if at + count > len(out):
            raise ValueError(f"kernel {kernel.name}: its descriptor enables user SGPRs up to s{at + count - 1} "
                             f"({', '.join(kd.user_sgprs)}) but USER_SGPR_COUNT is {kd.user_sgpr_count}")
        if name in ADDRESS_FIELDS:
            if name not in values:
                raise ValueError(f"kernel {kernel.name} takes {name} in s{at}:{at + 1}; no value was given "
                                 f"(given: {', '.join(values) or 'none'})")
            out[at:at + 2] = [lo(values[name]), hi(values[name])]
        elif name == "private_segment_size":
            out[at] = kd.private_segment_fixed_size
    return out


def dispatch_of(kernel: KernelSymbol, image_va: Word, values: Mapping[str, Word], grid: tuple[Word, Word, Word],
                local: tuple[int, int, int], scratch: Sequence[Word] = (0,), waves: int = 32) -> Dispatch:
    """The dispatch of `kernel` of a code object loaded at `image_va`; `scratch` per XCC, `waves` the scratch
    waves each holds."""
    kd = kernel.descriptor
    return Dispatch(code=image_va + kernel.code_offset, rsrc1=kd.compute_pgm_rsrc1,
                    rsrc2=kd.compute_pgm_rsrc2 | lds_granules(kd.group_segment_fixed_size), rsrc3=kd.compute_pgm_rsrc3,
                    tmpring_size=tmpring_size(kd.private_segment_fixed_size, waves), scratch=tuple(scratch),
                    user_data=user_data(kernel, values), grid=grid, local=local, wave32=kd.wavefront32)

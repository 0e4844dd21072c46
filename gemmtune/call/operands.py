"""What the Python API takes as operands: numpy arrays and pyopencl views checked against their
buffers, op() flags and shapes, and whether a problem's buffers fit the device and the host.

Every check raises OperandError or OperandTypeError (GemmtuneErrors, and ValueError or
TypeError) or GemmtuneError for memory, before anything is allocated or enqueued.
"""

from __future__ import annotations

import contextlib
from typing import Mapping, NamedTuple

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from gemmtune import inputs
from gemmtune.errors import GemmtuneError, OperandError, OperandTypeError
from gemmtune.devices.info import DeviceInfo
from gemmtune.launch.operation import normalize_op
from gemmtune.launch.plan import INDEX_LIMIT
from gemmtune.precision import Precision, precision_of


_OUT_OF_MEMORY = {cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE, cl.status_code.OUT_OF_RESOURCES,
                  cl.status_code.OUT_OF_HOST_MEMORY}


def out_of_memory(e: Exception, what: str) -> GemmtuneError | None:
    """``e`` as GemmtuneError naming ``what`` ran out of memory, if it says an allocation failed,
    on the device (drivers may allocate lazily, so at an enqueue too) or on the host."""
    if isinstance(e, cl.Error) and e.code in _OUT_OF_MEMORY:
        return GemmtuneError(f"{what}: the device ran out of memory ({e.routine}: {cl.status_code.to_string(e.code)})")
    if isinstance(e, MemoryError):
        return GemmtuneError(f"{what}: the host ran out of memory ({e})")
    return None


@contextlib.contextmanager
def out_of_memory_as_error(what: str):
    try:
        yield
    except (cl.Error, MemoryError) as e:
        error = out_of_memory(e, what)
        if error is None:
            raise
        raise error from None


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def check_device_memory(info: DeviceInfo, what: str, buffers: Mapping[str, int]) -> None:
    """GemmtuneError, before anything is allocated, where ``buffers`` (name: bytes) do not fit
    the device: together in its global memory, each in its largest allocation."""
    total = sum(buffers.values())
    if total > info.global_mem_bytes:
        sizes = ", ".join(f"{name} {_size(size)}" for name, size in buffers.items() if size)
        raise GemmtuneError(f"{what} needs {_size(total)} of device memory ({sizes}), more than "
                            f"the {_size(info.global_mem_bytes)} of device {info.index}")
    name, largest = max(buffers.items(), key=lambda item: item[1], default=("", 0))
    if info.max_alloc_bytes and largest > info.max_alloc_bytes:
        raise GemmtuneError(f"{what} needs a buffer of {_size(largest)} for {name}, more than device "
                            f"{info.index} allows in one allocation ({_size(info.max_alloc_bytes)})")


def device_buffers_in_host(info, buffers: Mapping[str, int], over_arrays=()) -> dict[str, int]:
    """The host memory a call's device buffers take ("device NAME": bytes): on a CPU device all but
    those built over the caller's own arrays (``over_arrays``, by name); elsewhere none."""
    if info.type != "CPU":
        return {}
    return {f"device {name}": size for name, size in buffers.items() if name not in over_arrays}


def check_host_memory(what: str, needs: Mapping[str, int]) -> None:
    """GemmtuneError where ``needs`` (name: bytes) exceed the memory the host can give now."""
    free = inputs.available_host_bytes()
    total = sum(needs.values())
    if free is not None and total > free:
        sizes = ", ".join(f"{name} {_size(size)}" for name, size in needs.items() if size)
        raise GemmtuneError(f"{what} needs {_size(total)} of host memory ({sizes}), more than the {_size(free)} "
                            f"available")


def op_flag(name: str, flag) -> str:
    try:
        return normalize_op(flag)
    except ValueError as e:
        raise OperandError(f"{name}: {e}") from None


def op_shape(x, flag: str) -> tuple[int, int]:
    return x.shape if flag == "N" else x.shape[::-1]


def product_shape(a, b, c, ta: str, tb: str) -> tuple[int, int, int]:
    """M, N, K of op(a) op(b) into c (row-major), or OperandError where they disagree."""
    (m, ka), (kb, n) = op_shape(a, ta), op_shape(b, tb)
    if ka != kb:
        raise OperandError(f"op(a) is {m}x{ka} but op(b) is {kb}x{n}: inner dimensions differ")
    if c is not None and c.shape != (m, n):
        raise OperandError(f"c must be {m}x{n}, got {'x'.join(map(str, c.shape))}")
    return m, n, ka


def host_operand(name: str, x, batched: bool = False) -> np.ndarray:
    """``x`` as a numpy array: 2-D, or with ``batched`` of 2 dimensions or more (a stack of
    matrices, as numpy.matmul takes)."""
    try:
        x = np.asarray(x)
    except (ValueError, TypeError) as e:   # ragged nested lists, objects numpy cannot take
        raise OperandError(f"{name} is not an array numpy can take: {e}") from None
    if x.ndim != 2 and not (batched and x.ndim > 2):
        raise OperandError(f"{name} must be {'at least ' if batched else ''}2-D, got {x.ndim}-D")
    return x


def check_out(out, shape: tuple[int, ...], prec: Precision) -> None:
    """``gemm``'s ``out=``: None, or a writeable numpy array of the result's shape and dtype."""
    if out is None:
        return
    if not isinstance(out, np.ndarray):
        raise OperandTypeError(f"out must be a numpy array, got {type(out).__name__}")
    if out.shape != tuple(shape) or out.dtype != prec.dtype:
        raise OperandError(f"out must be a {'x'.join(map(str, shape))} {prec.dtype} array, got "
                           f"{'x'.join(map(str, out.shape))} {out.dtype}")
    if not out.flags.writeable:
        raise OperandError("out is read-only")


def deliver(out: np.ndarray | None, result: np.ndarray) -> np.ndarray:
    """The result, in ``out`` where one was given (``check_out``)."""
    if out is None or out is result:
        return result
    out[...] = result
    return out


def operand_precision(dtype) -> Precision:
    try:
        return precision_of(dtype)
    except ValueError as e:
        raise OperandError(str(e)) from None


class View(NamedTuple):
    """Where one operand of ``Gemm`` lies: its leading dimension and first element (in elements),
    its root buffer (a sub-buffer's parent) and its bytes' span [start, end) in that buffer."""
    ld: int
    first: int
    root: int | None
    start: int
    end: int


class BufferFacts(NamedTuple):
    """What a view is checked against, fixed for the life of a cl_mem: its size, where it lies
    in the memory it shares (a sub-buffer's parent and offset in it), and its access flags."""
    buffer: cl.MemoryObjectHolder
    size: int
    root: int
    base: int
    flags: int

    @classmethod
    def of(cls, buffer: cl.MemoryObjectHolder) -> "BufferFacts":
        parent = buffer.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
        base = 0 if parent is None else buffer.get_info(cl.mem_info.OFFSET)
        return cls(buffer, buffer.size, (parent or buffer).int_ptr, base, buffer.get_info(cl.mem_info.FLAGS))


# Flags that forbid what the kernels do to each operand's buffer (OpenCL leaves the result
# undefined): read a and b, write c.
_FORBIDDEN = {"a": (cl.mem_flags.WRITE_ONLY, "write-only", "read"),
              "b": (cl.mem_flags.WRITE_ONLY, "write-only", "read"),
              "c": (cl.mem_flags.READ_ONLY, "read-only", "written")}


def view(name: str, x, prec: Precision, context: cl.Context, known: dict[int, BufferFacts],
          now: dict[int, BufferFacts]) -> View:
    """Validate one operand of ``Gemm`` against its buffer, on every call: a cached operation
    was prepared for shapes and strides, and says nothing of this call's offset or buffer.
    ``known``: facts of buffers seen before, by id (each holds its buffer, so no other buffer
    has that id); this one's go into ``now``."""
    if not isinstance(x, cla.Array):
        raise OperandTypeError(f"{name} must be a pyopencl.array.Array, got {type(x).__name__}")
    if x.ndim != 2 or x.dtype != prec.dtype:
        raise OperandError(f"{name} must be a 2-D {prec.dtype} array, got {x.ndim}-D {x.dtype}")
    if x.context != context:
        raise OperandError(f"{name} lives in another OpenCL context than the queue")
    return matrix_view(name, x.shape, x.strides, x.offset, x.base_data, prec, known, now)


def matrix_view(name: str, shape, strides, offset: int, buffer, prec: Precision, known: dict[int, BufferFacts],
                now: dict[int, BufferFacts]) -> View:
    """``view``'s checks of a matrix given by its shape, strides and offset in ``buffer`` (a
    batch's problem without building its pyopencl view: ``x[0]`` costs more than the checks)."""
    item = prec.bytes
    (rows, cols), (row_stride, col_stride) = shape, strides
    if rows * cols == 0:
        return View(max(cols, 1), 0, None, 0, 0)   # nothing read or written, whatever its strides
    if cols > 1 and col_stride != item:
        raise OperandError(f"{name}'s elements within a row must be adjacent (strides {strides})")
    if rows > 1 and (row_stride % item or row_stride < cols * item):
        raise OperandError(f"{name}'s rows must be whole elements apart and not overlap (strides {strides})")
    if offset % item:
        raise OperandError(f"{name}'s offset ({offset} bytes) is not a whole number of {item}-byte elements")
    ld = row_stride // item if rows > 1 else cols
    first = offset // item
    if not isinstance(buffer, cl.MemoryObjectHolder):
        raise OperandTypeError(f"{name} must be backed by an OpenCL buffer, got {type(buffer).__name__}")
    facts = known.get(id(buffer))
    if facts is None:
        facts = BufferFacts.of(buffer)
    now[id(buffer)] = facts
    flag, made, used = _FORBIDDEN[name]
    if facts.flags & flag:
        raise OperandError(f"{name}'s buffer was made {made}, and {name} is {used}")
    # The last element's end, from the strides the kernels use: rows ld apart, elements adjacent.
    end = offset + ((rows - 1) * ld + cols) * item
    if end > facts.size:
        raise OperandError(f"{name} ({rows}x{cols}, strides {strides}, offset {offset} bytes) ends at byte "
                           f"{end}, beyond its buffer's {facts.size} bytes")
    if end // item > INDEX_LIMIT:
        raise OperandError(f"{name} ends at element {end // item} of its buffer; the kernels index at most "
                           f"{INDEX_LIMIT}")
    return View(ld, first, facts.root, facts.base + offset, facts.base + end)


class Addresses:
    """A view's element addresses as numpy's array interface (at a fictitious base, never
    read), so that np.shares_memory decides exactly whether two strided views meet. ``batch``:
    how many problems, and the bytes from one to the next (a batch of views, ``batch_view``)."""

    def __init__(self, view: View, shape: tuple[int, int], dtype: np.dtype, batch: tuple[int, int] = (1, 0)):
        self.__array_interface__ = {"version": 3, "typestr": dtype.str, "shape": (batch[0], *shape),
                                    "data": ((1 << 40) + view.start, True),
                                    "strides": (batch[1], view.ld * dtype.itemsize, dtype.itemsize)}


def overlap(x: View, x_shape, y: View, y_shape, dtype: np.dtype, x_batch=(1, 0), y_batch=(1, 0)) -> bool:
    if x.root is None or x.root != y.root or x.end <= y.start or y.end <= x.start:
        return False
    return bool(np.shares_memory(np.asarray(Addresses(x, x_shape, dtype, x_batch)),
                                 np.asarray(Addresses(y, y_shape, dtype, y_batch))))


def _self_overlapping(extents_strides) -> bool:
    """Whether a strided layout maps two index tuples to one address: taken dimension by
    dimension from the smallest stride, each stride must pass the extent of those before it (the
    test numpy's own layouts pass; a layout it refuses may, in odd interleavings, still be
    disjoint, and is refused all the same)."""
    reach = 1
    for stride, extent in sorted((s, e) for e, s in extents_strides if e > 1):
        if stride < reach:
            return True
        reach = stride * (extent - 1) + reach
    return False


def batch_view(name: str, x, prec: Precision, context: cl.Context, known: dict[int, BufferFacts],
               now: dict[int, BufferFacts], count: int) -> tuple[View, int]:
    """Validate one operand of a strided batch of ``count`` problems: a 3-D array (``x[z]`` the
    problem z's matrix; a first dimension of 1, or a 2-D array, shared by every problem, for a and
    b only), each problem's view as ``view`` checks it, and the last problem inside the buffer
    and the kernels' int indices. Returns problem 0's view, its end moved to the last problem's,
    and the elements from one problem to the next (0: shared)."""
    if not isinstance(x, cla.Array):
        raise OperandTypeError(f"{name} must be a pyopencl.array.Array, got {type(x).__name__}")
    if x.ndim == 2 and name != "c":
        return view(name, x, prec, context, known, now), 0
    if x.ndim != 3:
        raise OperandError(f"{name} must be a 3-D array (a batch of matrices), got {x.ndim}-D")
    if x.shape[0] not in (count, 1) or (name == "c" and x.shape[0] != count):
        raise OperandError(f"{name} holds {x.shape[0]} problems, the batch {count}")
    if count == 0:
        return View(max(x.shape[2], 1), 0, None, 0, 0), 0
    if x.dtype != prec.dtype:
        raise OperandError(f"{name} must hold 2-D {prec.dtype} matrices, got {x.dtype}")
    if x.context != context:
        raise OperandError(f"{name} lives in another OpenCL context than the queue")
    first = matrix_view(name, x.shape[1:], x.strides[1:], x.offset, x.base_data, prec, known, now)
    item, stride = prec.bytes, x.strides[0] if x.shape[0] > 1 else 0
    if stride % item or stride < 0:
        raise OperandError(f"{name}'s problems must be whole elements apart, forwards (strides {x.strides})")
    if name == "c" and count > 1 and (stride == 0 or _self_overlapping(
            zip(x.shape, (stride // item, first.ld, 1)))):
        raise OperandError(f"c's problems share elements (strides {x.strides}): each must have a c of its own")
    if x.shape[0] == 1 or x.shape[1] * x.shape[2] == 0:
        return first, 0
    end = first.end + (count - 1) * stride
    facts = now[id(x.base_data)]
    if end - facts.base > facts.size:
        raise OperandError(f"{name}'s last problem (strides {x.strides}, offset {x.offset} bytes) ends at byte "
                           f"{end - facts.base}, beyond its buffer's {facts.size} bytes")
    if (end - facts.base) // item > INDEX_LIMIT:
        raise OperandError(f"{name}'s last problem ends at element {(end - facts.base) // item} of its buffer; "
                           f"the kernels index at most {INDEX_LIMIT}")
    return first._replace(end=end), stride // item

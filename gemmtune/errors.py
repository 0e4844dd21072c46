"""The one exception type that reaches the user as a one-line message."""


class GemmtuneError(Exception):
    """Bad input or an unusable environment.

    The command line prints ``Error: <message>`` on one line and exits with code 2;
    library callers get the exception. The message must name what is wrong.
    """


class OperandError(GemmtuneError, ValueError):
    """An operand or scalar that ``gemm`` or ``Gemm`` cannot take: a shape, a dtype, a view
    outside its buffer, an output that overlaps an input, a scalar out of range. Also a
    ValueError, which numpy-style callers catch for such input."""


class OperandTypeError(GemmtuneError, TypeError):
    """An operand or queue of the wrong type (also a TypeError)."""

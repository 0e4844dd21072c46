"""The one exception type that reaches the user as a one-line message."""


class GemmtuneError(Exception):
    """Bad input or an unusable environment.

    The command line prints ``Error: <message>`` on one line and exits with code 2;
    library callers get the exception. The message must name what is wrong.
    """

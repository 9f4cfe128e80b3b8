# SPDX-License-Identifier: MIT
"""Exceptions: a refusal by locusd or the client library names its code
(LOCUS_ENODEST, ETIMEDOUT, ...) and the reason in a sentence.

Bad input to a call of this package raises ValueError or TypeError before
anything is submitted; these are for what locusd (or the library talking to
it) answered.
"""
import errno as _errno

from . import _lib

# What a completion's status means for the request that carried it.
_REASONS = {
    _lib.LOCUS_ENODEST: "no eligible decoder is up (none attached, none reporting its load "
                        "within load_timeout_ms, or none the request allows)",
    _lib.LOCUS_ESTATE: "no table is in use (push one with locusctl push)",
    _lib.LOCUS_EFULL: "the receiver's inbox or ring is full",
    _lib.LOCUS_EPEERDOWN: "the receiver is not attached or its node is down",
    _lib.LOCUS_ESTALEPLACEMENT: "a receiving rank does not hold the placement generation the "
                                "rows were planned under (a placement change is under way)",
    _lib.LOCUS_EBADMAGIC: "the request's header is not one locusd knows",
    _lib.LOCUS_EVERSION: "the request's format version is not locusd's",
    _lib.LOCUS_ETRUNCATED: "the request's shape or length does not match the table in use",
    _lib.LOCUS_ERANGE: "a value of the request is out of range for locusd",
    _lib.LOCUS_EPROTO: "locusd refused a malformed descriptor",
    _errno.EOPNOTSUPP: "locusd's signature cache is off (sig_cache_bytes = 0)",
    _errno.EEXIST: "a block hash is named twice in the request",
    _errno.ENOTCONN: "locusd is gone (killed or stopped); attach again to a restarted one",
    _errno.ETIMEDOUT: "no answer within the timeout",
}


# errno values with two names: the one locus's documentation uses
_PREFERRED = {_errno.EOPNOTSUPP: "EOPNOTSUPP", _errno.EAGAIN: "EAGAIN"}


def code_name(code):
    """LOCUS_E* or the errno name of -code or code."""
    code = abs(int(code))
    return (_lib.ERROR_NAMES.get(code) or _PREFERRED.get(code) or
            _errno.errorcode.get(code, f"error {code}"))


class LocusError(Exception):
    """A refusal: .code (positive errno or LOCUS_E*), .name, .reason."""

    def __init__(self, code, reason=None, *, what=None):
        self.code = abs(int(code))
        self.name = code_name(self.code)
        self.reason = reason or _REASONS.get(self.code) or _lib.strerror(self.code)
        self.what = what
        head = f"{what}: " if what else ""
        super().__init__(f"{head}{self.name} ({_lib.strerror(self.code)}): {self.reason}")


class LocusTimeout(LocusError, TimeoutError):
    """A wait ran out of its timeout (ETIMEDOUT)."""


class LocusGone(LocusError, ConnectionError):
    """locusd is not there (not running, killed, or stopped): ENOTCONN, ENOENT, ECONNREFUSED."""


class NoTableError(LocusError, ValueError):
    """The instance has no table of the kind the call needs (LOCUS_ESTATE)."""


_GONE = {_errno.ENOTCONN, _errno.ENOENT, _errno.ECONNREFUSED}


def from_code(code, reason=None, *, what=None):
    """The exception for code (negative or positive)."""
    c = abs(int(code))
    if c == _errno.ETIMEDOUT:
        cls = LocusTimeout
    elif c in _GONE:
        cls = LocusGone
    else:
        cls = LocusError
    return cls(c, reason, what=what)

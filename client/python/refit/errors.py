"""refit's exceptions: RefitError, and one subclass per kind of failure a caller handles
differently; each carries the gRPC status code and refit's message."""
from typing import Dict, Type

import grpc


class RefitError(Exception):
    """A refit call failed. `code` is the grpc.StatusCode; the message names the object
    and the reason, as the coordinator or refitd wrote it."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class RefitTimeout(RefitError):
    """The deadline passed (DEADLINE_EXCEEDED): the epoch, a wait or the call itself."""


class RefitAborted(RefitError):
    """The epoch failed and was rolled back (ABORTED): the message says what the
    destinations hold now."""


class RefitUnavailable(RefitError):
    """The coordinator or refitd cannot be reached (UNAVAILABLE): worth a retry."""


class RefitRejected(RefitError):
    """The request cannot be served as it is (INVALID_ARGUMENT, FAILED_PRECONDITION,
    NOT_FOUND, ALREADY_EXISTS, OUT_OF_RANGE): a bad layout, an incomplete group, an old
    version. Retrying the same request gives the same answer."""


class RefitInvalidInput(RefitRejected, ValueError, KeyError):
    """An argument the client refuses before asking refitd or the coordinator
    (INVALID_ARGUMENT): a shape that is not the box's, a tensor with no box, an unknown
    dtype. Also a ValueError and a KeyError, as these errors were before."""

    def __init__(self, message: str):
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, message)

    __str__ = Exception.__str__  # KeyError's would quote the message


class RefitDataLoss(RefitError):
    """Bytes are not what they should be (DATA_LOSS): a version committed but not copied
    into a staged rank's buffers (wait_for_version), or checksums of an epoch that
    disagree (refit). The message names the rank or the box."""


class RefitPermissionDenied(RefitError):
    """Authentication or authorization failed (UNAUTHENTICATED, PERMISSION_DENIED)."""


_BY_CODE: Dict[grpc.StatusCode, Type[RefitError]] = {
    grpc.StatusCode.DEADLINE_EXCEEDED: RefitTimeout,
    grpc.StatusCode.ABORTED: RefitAborted,
    grpc.StatusCode.UNAVAILABLE: RefitUnavailable,
    grpc.StatusCode.INVALID_ARGUMENT: RefitRejected,
    grpc.StatusCode.FAILED_PRECONDITION: RefitRejected,
    grpc.StatusCode.NOT_FOUND: RefitRejected,
    grpc.StatusCode.ALREADY_EXISTS: RefitRejected,
    grpc.StatusCode.OUT_OF_RANGE: RefitRejected,
    grpc.StatusCode.DATA_LOSS: RefitDataLoss,
    grpc.StatusCode.UNAUTHENTICATED: RefitPermissionDenied,
    grpc.StatusCode.PERMISSION_DENIED: RefitPermissionDenied,
}


def error_for(code: grpc.StatusCode, message: str) -> RefitError:
    """The RefitError subclass for `code`."""
    return _BY_CODE.get(code, RefitError)(code, message)


def from_rpc_error(error: grpc.RpcError) -> RefitError:
    """The RefitError for a grpc.RpcError."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return error_for(code, details or str(error))

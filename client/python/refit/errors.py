"""One exception type for every failure, carrying the gRPC status code and refit's message."""
import grpc


class RefitError(Exception):
    """A refit call failed. `code` is the grpc.StatusCode; the message names the object
    and the reason, as the coordinator or refitd wrote it."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def from_rpc_error(error):
    """The RefitError for a grpc.RpcError."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return RefitError(code, details or str(error))

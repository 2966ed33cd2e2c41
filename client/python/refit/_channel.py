"""gRPC channels as refit's C++ clients make them: TLS and the token from the environment
(REFIT_TLS_CA, REFIT_TLS_CERT, REFIT_TLS_KEY, REFIT_TOKEN_FILE), plaintext otherwise."""
import os
import stat

import grpc

from .errors import RefitInvalidInput


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise RefitInvalidInput(f"{what} {path}: {e.strerror}") from e


def token_metadata():
    """The authorization metadata for control RPCs, or () without REFIT_TOKEN_FILE."""
    path = os.environ.get("REFIT_TOKEN_FILE")
    if not path:
        return ()
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise RefitInvalidInput(f"token file {path} is readable by others (chmod 600 it)")
    token = _read(path, "token file").decode().strip()
    return (("authorization", "Bearer " + token),)


def coordinator_channel(address):
    ca = os.environ.get("REFIT_TLS_CA")
    if not ca:
        return grpc.insecure_channel(address)
    cert = os.environ.get("REFIT_TLS_CERT")
    key = os.environ.get("REFIT_TLS_KEY")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(ca, "CA certificate"),
        private_key=_read(key, "client key") if key else None,
        certificate_chain=_read(cert, "client certificate") if cert else None)
    return grpc.secure_channel(address, credentials)


def local_channel(socket_path):
    return grpc.insecure_channel("unix:" + socket_path)

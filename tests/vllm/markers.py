"""The files the trainers and the engine signal each other with (WORK/published-V, then
WORK/refitted-V), as an RL loop's driver would by message."""
import os
import time


def wait_for(path: str, who: str, timeout: float = 600.0) -> None:
    """Returns once `path` exists; raises after `timeout` seconds, naming it."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{who}: {path} did not appear in {timeout} s")
        time.sleep(0.05)

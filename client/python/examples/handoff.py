"""How the examples' processes hand versions to each other: through files in a shared
folder (weights saved by the trainers, "checked" marks written by the inference side)."""
import os
import time


def wait_for_file(path, timeout):
    """Returns once `path` exists; TimeoutError after `timeout` seconds."""
    give_up = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > give_up:
            raise TimeoutError(f"{path} did not appear in {timeout} s")
        time.sleep(0.02)

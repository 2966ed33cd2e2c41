"""vLLM's OpenAI server (CPU) with refit as its weight-transfer backend chosen by name
(`--weight-transfer-config '{"backend": "refit"}'`), refitted after each of the trainers'
steps by the trainers themselves through vLLM's trainer-side API (trainer.py --drive: the
"refit" trainer engine and vLLM's HTTP weight-sync client; around it rank 0 pauses the
server with /pause?mode=wait, which lets in-flight requests finish on the old version and
clears the caches, and resumes it), while clients here keep asking.

Every answer is checked against a transformers forward with the trainers' full weights: one
finished before the pause is the old version's, one asked after the pause began is the new
version's (a request the trainer asked while paused waited and then completed), none is
anything else. The pause window is printed.
    server.py --tp N --model DIR --work DIR"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

import requests

from markers import wait_for
from memory import PeakGrowth
from reference import PROMPTS, check, mismatch, reference
from serving import complete

CLIENTS = 2  # threads asking all along, so that some requests are in flight at each pause


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(args):
    """The server process, once healthy, and its URL."""
    url = f"http://127.0.0.1:{free_port()}"
    log = open(f"{args.work}/server.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
         "--dtype", "float32", "--enforce-eager", "--seed", "0", "--max-model-len", "256",
         "--max-num-seqs", "4", "--tensor-parallel-size", str(args.tp),
         "--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1],
         "--weight-transfer-config", '{"backend": "refit"}'],
        env=dict(os.environ, VLLM_SERVER_DEV_MODE="1"),  # the weight-transfer routes
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None:
            raise SystemExit(f"server: exited with {process.returncode} while starting")
        try:
            if requests.get(f"{url}/health", timeout=2).ok:
                return process, url
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise SystemExit("server: not healthy within 300 s")
        time.sleep(0.2)


class Clients:
    """Threads asking the server one prompt after another, recording when each was asked
    and answered."""

    def __init__(self, url, model):
        self.url, self.model = url, model
        self.answers = []  # (prompt index, asked, answered, answer)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.failures = []
        self.threads = [threading.Thread(target=self._ask, args=(i,)) for i in range(CLIENTS)]
        for thread in self.threads:
            thread.start()

    def _ask(self, first):
        index = first
        while not self.stopping.is_set():
            prompt = index % len(PROMPTS)
            asked = time.monotonic()
            try:
                answer = complete(self.url, self.model, PROMPTS[prompt])
            except Exception as error:  # reported by stop()
                self.failures.append(f"prompt {prompt} asked at {asked:.3f}: {error}")
                return
            with self.lock:
                self.answers.append((prompt, asked, time.monotonic(), answer))
            index += 1

    def asked_after(self, moment):
        with self.lock:
            return sum(1 for _, asked, _, _ in self.answers if asked > moment)

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        if self.failures:
            raise SystemExit(f"server: a request failed: {self.failures[0]}")
        return self.answers


def check_answers(version, answers, pause, expected_old, expected_new):
    """Answers finished before /pause was sent are the old version's, those asked after it
    returned the new one's, and those in between one of the two."""
    for prompt, asked, answered, answer in answers:
        if asked >= pause["paused"]:
            why = mismatch(answer, expected_new[prompt])
            if why is not None:
                raise SystemExit(f"version {version}: prompt {prompt} asked after the pause "
                                 f"began: {why}")
        elif answered <= pause["pausing"]:
            why = mismatch(answer, expected_old[prompt])
            if why is not None:
                raise SystemExit(f"version {version}: prompt {prompt} answered before the "
                                 f"pause: {why}")
        elif mismatch(answer, expected_old[prompt]) and mismatch(answer, expected_new[prompt]):
            raise SystemExit(f"version {version}: prompt {prompt} in flight at the pause: "
                             f"neither version's answer: {answer}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--model", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--versions", type=int, default=3)
    args, _ = parser.parse_known_args()
    process, url = start_server(args)
    try:
        expected = reference(args.model)
        check("version 0", [complete(url, args.model, p) for p in PROMPTS], expected)
        with open(f"{args.work}/server-url", "w") as marker:
            marker.write(url)
        for version in range(1, args.versions + 1):
            clients = Clients(url, args.model)
            while clients.asked_after(0) < CLIENTS:  # requests are flowing
                time.sleep(0.01)
            growth = PeakGrowth(process.pid, tree=True)
            open(f"{args.work}/asking-{version}", "w").close()
            wait_for(f"{args.work}/refitted-{version}", "server")
            extra = growth.bytes()
            with open(f"{args.work}/refitted-{version}") as marker:
                pause = json.load(marker)
            while clients.asked_after(pause["resumed"]) < CLIENTS:  # they go on after it
                time.sleep(0.01)
            answers = clients.stop()
            expected_new = reference(args.model, f"{args.work}/weights-{version}.safetensors")
            check_answers(version, answers, pause, expected, expected_new)
            why = mismatch(pause["asked_while_paused"], expected_new[1])
            if why is not None:
                raise SystemExit(f"version {version}: the request asked while paused: {why}")
            check(f"version {version}", [complete(url, args.model, p) for p in PROMPTS],
                  expected_new)
            in_flight = sum(1 for _, asked, answered, _ in answers
                            if asked < pause["pausing"] < answered)
            print(f"server: version {version}: {len(answers)} answers from clients asking all "
                  f"along ({in_flight} in flight at the pause), each its version's; a request "
                  f"asked while paused was answered {pause['answered'] - pause['resumed']:.3f} "
                  f"s after /resume, by the new version; {pause['bytes']} bytes moved; pause "
                  f"window {pause['resumed'] - pause['pausing']:.3f} s; the server's resident "
                  f"memory peaked {extra} bytes above its start", flush=True)
            expected = expected_new
            open(f"{args.work}/checked-{version}", "w").close()
        print("server: done", flush=True)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


if __name__ == "__main__":
    main()

"""Every refitctl command the docs show still parses.

Collects the refitctl commands of README.md, deploy/README.md and docs/*.md (lines of code
blocks, and inline code spans, that start with `refitctl ` or `./bazel-bin/client/refitctl `),
makes each runnable (continuation lines joined, optional `[...]` parts dropped, the first of
`a|b|c` alternatives, placeholders such as HOST:7700 or N made concrete, a coordinator
address that refuses connections), runs it with the refitctl built here, and fails naming the
page and the command when refitctl says the command or a flag is unknown. Other errors (no
coordinator, no such file, an unknown model name used as a placeholder) are the command
running, not its words, and pass.

Usage: check_doc_commands.py REFITCTL PAGE...
"""

import re
import subprocess
import sys

REFITCTL = re.compile(r"^(?:\./bazel-bin/client/)?refitctl( .*)?$")
PARSE_ERRORS = ("unknown flag", "unknown command", "unexpected argument")
# Placeholders the docs use, and what stands for them.
PLACEHOLDERS = [
    (re.compile(r"HOST:(?:7700|PORT)"), "127.0.0.1:9"),
    (re.compile(r"--version[= ]N\b"), "--version=1"),
    (re.compile(r"--node[= ]NAME\b"), "--node=node-a"),
]


def commands_of(text):
    """The refitctl commands of a page: from code blocks and inline code spans."""
    found = []
    in_block = False
    pending = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_block = not in_block
            pending = None
            continue
        if in_block:
            if pending is not None:
                pending += " " + stripped.rstrip("\\").strip()
                if not stripped.endswith("\\"):
                    found.append(pending)
                    pending = None
                continue
            if REFITCTL.match(stripped.split("#")[0].strip()):
                command = stripped.split("#")[0].strip()
                if command.endswith("\\"):
                    pending = command.rstrip("\\").strip()
                else:
                    found.append(command)
            continue
        for span in re.findall(r"`([^`]+)`", line):
            if REFITCTL.match(span.strip()):
                found.append(span.strip())
    return found


def runnable(command):
    """The command's words with its optional parts dropped and placeholders filled."""
    previous = None
    while previous != command:  # nested brackets, innermost first
        previous = command
        command = re.sub(r"\[[^\[\]]*\]", "", command)
    command = command.replace("...", "")
    for pattern, value in PLACEHOLDERS:
        command = pattern.sub(value, command)
    words = []
    for word in command.split():
        words.append(word.split("|")[0] if "|" in word else word)
    return words[1:]  # without the program's name


def main(argv):
    refitctl, pages = argv[1], argv[2:]
    checked = 0
    failures = []
    for page in pages:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        for command in commands_of(text):
            args = runnable(command)
            if "--help" in args or "-h" in args:
                continue
            try:
                run = subprocess.run([refitctl] + args, capture_output=True, text=True,
                                     timeout=60)
                said = run.stdout + run.stderr
            except subprocess.TimeoutExpired:
                said = ""  # running (a plan of a large model): it parsed
            checked += 1
            if any(error in said for error in PARSE_ERRORS):
                failures.append("%s: `%s` (ran as: refitctl %s): %s" % (
                    page, command, " ".join(args), said.strip().splitlines()[0]))
    print("%d documented refitctl commands checked" % checked)
    for failure in failures:
        print("FAIL " + failure)
    if checked == 0:
        print("FAIL no refitctl command found in the pages")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

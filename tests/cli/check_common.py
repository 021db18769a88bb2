"""What the tool's check scripts share: failures are recorded, printed as they happen, and
decide the exit status."""
import sys

failures = []


def fail(*what):
    failures.append(" ".join(str(w) for w in what))
    print("FAIL", *what)


def finish(summary):
    """Prints the summary line (with the count of failures) and exits 1 if any."""
    print(f"{summary}, {len(failures)} failures")
    sys.exit(1 if failures else 0)

# Shared by the tools/ scripts: find the checkout and Swift, and say things on stderr.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! command -v swift >/dev/null 2>&1 && [ -x /opt/swift/usr/bin/swift ]; then
  PATH=$PATH:/opt/swift/usr/bin
fi
command -v swift >/dev/null 2>&1 || { echo "swift is not installed (https://swift.org/install)" >&2; exit 1; }
note() { echo "==> $*" >&2; }

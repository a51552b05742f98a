#!/usr/bin/env bash
# Packs the built daemon with every shared library it loads, glibc and its loader included, into
# DEST (default .daemon/), for a host that cannot build it (the GPU host of ops/gpu-check.sh,
# which has no C++ toolchain): DEST/opforge runs it through the packed loader, so the host's
# libraries matter not, and the processes it starts (workers, python) see the host's own.
#   ops/pack-daemon.sh [BUILD_DIR] [DEST]      then carry DEST (about 45 MB) to the device
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${OPFORGE_BUILD_DIR:-build}}
dest=${2:-.daemon}
rm -rf "$dest"
mkdir -p "$dest/lib"
cp "$build/opforge" "$dest/opforge.bin"
strip "$dest/opforge.bin" 2>/dev/null || true
loader=
while read -r lib; do
  cp -L "$lib" "$dest/lib/"
  [[ $lib == *ld-linux* ]] && loader=$(basename "$lib")
done < <(ldd "$build/opforge" | awk '/=>/ {print $3} /ld-linux/ {print $1}')
[[ -n $loader ]] || { echo "pack-daemon: no dynamic loader in ldd's output" >&2; exit 1; }
# Run through the loader, /proc/self/exe is the loader, so the daemon is told where its data is.
cat >"$dest/opforge" <<WRAPPER
#!/usr/bin/env bash
here=\$(cd "\$(dirname "\$0")" && pwd)
export OPFORGE_CONFIG_DIR=\${OPFORGE_CONFIG_DIR:-\$here/../config}
exec "\$here/lib/$loader" --library-path "\$here/lib" "\$here/opforge.bin" "\$@"
WRAPPER
chmod +x "$dest/opforge"
du -sh "$dest"

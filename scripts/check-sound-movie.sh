#!/usr/bin/env bash
# Issue 10's "done when", as a user runs it: `viewfinder record --device sim --audio PCM
# --duration 4 --output a.mov` with PCM an ALSA `file` PCM over a `null` slave (a known signal:
# left a 440 Hz tone in 100 ms bursts, right a frame counter), then ffprobe's durations and the
# decoded samples against the input. Passes when the audio stream lasts as long as the video within
# one frame (33 ms at 30 fps) and every sample in the movie is the input's, in order.
# Then the same through `viewfinder dump --audio` and a movie recorded from its replay.
#
#   bash scripts/check-sound-movie.sh [path/to/viewfinder]   # default .build/debug/viewfinder
set -euo pipefail
cd "$(dirname "$0")/.."
V=${1:-.build/debug/viewfinder}
[ -x "$V" ] || { echo "check-sound-movie: no $V (swift build first)" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 - "$W" <<'PY'
import numpy as np, sys
w = sys.argv[1]; rate = 48000; i = np.arange(rate * 8)
left = np.where((i // 4800) % 2 == 0, (8000 * np.sin(2 * np.pi * 440 * i / rate)).astype(np.int16), 0)
right = (i % 65536) - 32768
np.stack([left, right], 1).astype('<i2').tofile(w + '/sig.raw')
open(w + '/asound.conf', 'w').write('pcm.vfnull { type null }\npcm.vfsig { type file\n slave.pcm "vfnull"\n'
    ' file "/dev/null"\n infile "%s/sig.raw"\n format "raw" }\n' % w)
PY
export ALSA_CONFIG_PATH="/usr/share/alsa/alsa.conf:$W/asound.conf"
"$V" record --device sim:width=640,height=480,fps=30 --audio vfsig --duration 4 --output "$W/a.mov" 2>/dev/null
# The same sound through a raw dump and its replay: `dump:FILE` brings the dump's sound, so a movie
# recorded from the replay (as fast as it goes) has it too, in sync.
"$V" dump --device sim:width=640,height=480,fps=30 --audio vfsig --duration 3 --output "$W/d.vfdump" >"$W/dump.txt" 2>/dev/null
# The dump's summary says what the sound lost (overruns, ring drops), as `record`'s does.
grep -q "^sound: [0-9]* samples captured.*overruns" "$W/dump.txt" || { echo "check-sound-movie: dump's summary has no sound line:" >&2; cat "$W/dump.txt" >&2; exit 1; }
"$V" record --device "dump:$W/d.vfdump,paced=false" --output "$W/b.mov" 2>/dev/null
check() {   # movie, expected video seconds, label
    ffmpeg -v error -y -i "$1" -map 0:a -f s16le -acodec pcm_s16le "$W/x.raw"
    python3 - "$W" "$1" "$2" "$3" <<'PY'
import json, subprocess, sys, numpy as np
w, movie, want, label = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
probe = json.loads(subprocess.run(['ffprobe', '-v', 'error', '-show_entries', 'stream=codec_type,duration',
                                   '-of', 'json', movie], capture_output=True, check=True).stdout)
dur = {s['codec_type']: float(s['duration']) for s in probe['streams']}
a = np.fromfile(w + '/x.raw', '<i2').reshape(-1, 2)
sig = np.fromfile(w + '/sig.raw', '<i2').reshape(-1, 2)
# The counter names each input frame (mod 65536): find where the track starts in the input.
first = int(np.nonzero(np.any(a != 0, axis=1))[0][0])
n0 = int(a[first, 1]) + 32768
best = min((int(np.count_nonzero(np.any(a[first:] != sig[n0 + 65536 * m + np.arange(len(a) - first)], axis=1))), m)
           for m in range(6) if n0 + 65536 * m + len(a) - first <= len(sig))
diff_ms = abs(dur['video'] - dur['audio']) * 1000
print(f"check-sound-movie ({label}): video {dur['video']:.4f} s, audio {dur['audio']:.4f} s (difference {diff_ms:.2f} ms); "
      f"{len(a)} audio frames, {first} of leading silence, {best[0]} differing from the input", file=sys.stderr)
# want 0: the movie is as long as the recording it was made from (a replay), not a set duration.
ok = diff_ms < 1000 / 30 and best[0] == 0 and first < 4800 and (want == 0 or abs(dur['video'] - want) < 0.001)
sys.exit(0 if ok else 1)
PY
}
rc=0
check "$W/a.mov" 4 "record --audio" || rc=1
check "$W/b.mov" 0 "replay of a dump with sound" || rc=1
exit $rc

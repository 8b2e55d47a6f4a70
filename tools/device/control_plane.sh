#!/usr/bin/env bash
# On a lent GPU machine (16 cores; run there with carry [".whl", ".devdata"] after
# tools/device/prepare_control_plane.sh here): `greenserve bench control-plane` on the
# whole machine and pinned to 2 and 4 of its cores, so the 2-core host's numbers can be read
# against a quiet machine's, same code, same call. Never touches the GPU or its settings.
# Writes at most 8 files under $OUT (the tool's limit), most important run first, so a run
# cut short still returns what finished.
#   control_plane.sh sweep    whole machine to 4,000 req/s, pinned to 2 and 4 cores, separate path
#   control_plane.sh stalls   tools/measure_stalls.py idle and beside the whole-machine bench,
#                             then the separate path with --hops
#   control_plane.sh profile  CPU per process and py-spy of the request path at 2,000 req/s
#                             on the whole machine, then the bench beside the stall meter
#   control_plane.sh cells    the same 4 workers as 1, 2 and 4 cells (--cells), whole machine,
#                             load from 2 client processes (--clients 2) in each
#   control_plane.sh repeat   is a noisy tail the machine's first minutes? 1 cell at once, again
#                             after touching 32 GiB of fresh memory, then 4 and 2 cells, then 1
#                             cell last; the stall meter runs beside the first 240 s
#   control_plane.sh goal     the issue's verdict for 4 cells: 2,050 and 2,250 req/s, 10-s steps,
#                             three runs without per-hop stamps (the verdict is the median run's,
#                             the bench's rule; with two runs it is the worse one), then
#                             one run with them, to see which hop holds a slow run's tail
#   control_plane.sh verdict  goal's three verdict runs alone, to repeat them in a second call
#   control_plane.sh http     what the OpenAI gateway adds: --entry both (JetStream, then HTTP to
#                             a gateway drawn at random), 1 and 4 cells
set -u
mode=${1:-sweep}
out=${OUT:-/tmp/greenserve-device}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH" GREENSERVE_DATA_DIR="$PWD/.devdata"
{
    nproc
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket|NUMA node'
    uptime
    python3 -V
    python3 -c "from shared.servers import find_binary as f; print(f('nats-server'), f('redis-server'))"
    python3 tools/measure_wakeup_cost.py
    taskset -c 0,1 python3 tools/measure_wakeup_cost.py
} >"$out/env.txt" 2>&1 || { cat "$out/env.txt"; exit 1; }
tail -3 "$out/env.txt"
bench() { # name, seconds, command prefix..., -- bench args...
    local name=$1 limit=$2
    shift 2
    local prefix=()
    while [ "$1" != "--" ]; do prefix+=("$1"); shift; done
    shift
    echo "== $name: ${prefix[*]} $*" | tee -a "$out/bench.log"
    timeout "$limit" "${prefix[@]}" python3 -m greenserve.cli bench control-plane --json ${HOPS---hops} "$@" \
        >"$out/$name.json" 2>>"$out/bench.log"
    echo "   rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('sustained_rps','p99_added_ms','cpu_cores','machine_cores','goal_met')}, d['summary'])" "$out/$name.json" 2>&1 | head -c 1500)"
}
high=100,200,400,800,1200,1600,2000,2500,3000,4000
[ "$mode" = cells ] && high=100,400,800,1200,1600,2000,2500,3000
case $mode in
sweep)
    bench all16 150 env -- --rates "$high" --plots "$out/all16"
    bench pin2 150 taskset -c 0,1 -- --plots "$out/pin2"
    bench sep16 150 env -- --rates "$high" --request-path separate
    bench pin4 120 taskset -c 0-3 -- --rates "$high"
    ;;
stalls)
    echo "== idle stalls" | tee -a "$out/bench.log"
    python3 tools/measure_stalls.py --procs 8 --seconds 20 --pin | tee -a "$out/env.txt"
    python3 tools/measure_stalls.py --procs 4 --seconds 100 --pin >"$out/stalls_bench.json" &
    bench all16 130 env -- --plots "$out/all16"
    wait
    cat "$out/stalls_bench.json"
    bench sep16 130 env -- --request-path separate --plots "$out/sep16"
    ;;
profile)
    python3 tools/measure_stalls.py --procs 8 --seconds 10 --pin | tee -a "$out/env.txt"
    echo "== profile at 2,000 req/s" | tee -a "$out/bench.log"
    timeout 150 python3 tools/profile_request_path.py --rate 2000 --seconds 15 \
        --request-path colocated --py-spy "$out/prof" --py-spy-only requestpath \
        >"$out/profile.json" 2>>"$out/bench.log"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ('p99_added_ms','cpu_cores','total_cpu_ms_per_request')})" "$out/profile.json"
    python3 tools/measure_stalls.py --procs 4 --seconds 90 --pin >"$out/stalls_bench.json" &
    bench all16 130 env -- --plots "$out/all16"
    wait
    cat "$out/stalls_bench.json"
    ;;
cells)
    python3 tools/measure_stalls.py --procs 8 --seconds 10 --pin | tee -a "$out/env.txt"
    for cells in 1 2 4; do
        bench "cells$cells" 140 env -- --workers 4 --cells "$cells" --clients 2 --rates "$high" \
            --plots "$out/cells$cells"
    done
    ;;
repeat)
    cat /sys/kernel/mm/transparent_hugepage/enabled >>"$out/env.txt" 2>&1
    python3 tools/measure_stalls.py --procs 4 --seconds 240 --pin >"$out/stalls_beside.json" &
    faults() { echo "$1 $(uptime) $(grep -E '^(pgfault|pgmajfault|thp_fault_alloc) ' /proc/vmstat | tr '\n' ' ')" >>"$out/env.txt"; }
    two=--rates=100,2000
    faults r1
    bench r1_cells1 80 env -- --workers 4 --cells 1 --clients 2 "$two"
    faults touch
    python3 -c "b = b'x' * (32 << 30); print(len(b) >> 30, 'GiB touched')" | tee -a "$out/env.txt"
    faults r2
    bench r2_cells1 80 env -- --workers 4 --cells 1 --clients 2 "$two"
    bench cells4 90 env -- --workers 4 --cells 4 --clients 2 --rates 100,2000,3000
    bench cells2 80 env -- --workers 4 --cells 2 --clients 2 "$two"
    faults r3
    bench r3_cells1 80 env -- --workers 4 --cells 1 --clients 2 "$two"
    faults end
    wait
    ;;
goal | verdict)
    # Rates start above 2,000 so no Poisson draw lands a step just under the goal's rate.
    # The verdict runs without per-hop stamps (HOPS=""): they are diagnostics that cost the
    # request path a struct copy per hop, and the product does not run with them. Each step
    # reports other_cores (CPU the machine spent outside the stack and its clients) and
    # steal_cores, so a slow run says whether it was the stack's own.
    HOPS="" bench cells4 300 env -- --workers 4 --cells 4 --clients 2 --rates 2050,2250 \
        --step-s 10 --repeat 3 --plots "$out/cells4"
    [ "$mode" = goal ] && bench cells4hops 90 env -- --workers 4 --cells 4 --clients 2 --rates 2050 --step-s 10
    ;;
http)
    # No --hops: the HTTP entry has no per-hop stamps.
    HOPS="" bench http4 200 env -- --workers 4 --cells 4 --entry both --rates 100,1000,2000,3000 \
        --plots "$out/http4"
    HOPS="" bench http1 150 env -- --workers 4 --cells 1 --entry both --rates 100,1000,2000
    ;;
*) echo "unknown mode $mode (sweep | stalls | profile | cells | repeat | goal | verdict | http)" >&2; exit 2 ;;
esac

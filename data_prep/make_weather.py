#!/usr/bin/env python
"""Make a weather-like gridded data set in chunked HDF5.

Input:  nothing (deterministic in --seed).
Output: OUT/weather-NNNNN.h5, each with fields[time, channel, lat, lon] float32 chunked one
        (time step, channel) per chunk, plus lat, lon, time_step; OUT/manifest.json.
Expect: steps x channels x lat x lon x 4 bytes (defaults: 64 x 8 x 121 x 240 x 4 = 59.5 MB).

    python data_prep/make_weather.py --out data/weather --steps 64 --channels 8 --lat 121 --lon 240
"""

import argparse
import sys

from hpcbench.data.generators.weather import WeatherSpec, make_weather


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=64, help="time steps")
    p.add_argument("--channels", type=int, default=8, help="variables (t2m, u10, v10, msl, ...)")
    p.add_argument("--lat", type=int, default=121, help="latitude points (121 = 1.5 degrees)")
    p.add_argument("--lon", type=int, default=240, help="longitude points (240 = 1.5 degrees)")
    p.add_argument("--steps-per-shard", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    m = make_weather(a.out, WeatherSpec(a.steps, a.channels, a.lat, a.lon, a.steps_per_shard, a.seed),
                     command=" ".join(sys.argv))
    print(f"{a.out}: {m.samples} time steps of {a.channels}x{a.lat}x{a.lon} in {len(m.shards)} shards, "
          f"{m.bytes / 1e6:.1f} MB; manifest {a.out}/manifest.json")


if __name__ == "__main__":
    main()

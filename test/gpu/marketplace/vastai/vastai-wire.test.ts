import { describe, expect, it } from "vitest";
import { gigabytes, minMegabytes, parseOffers } from "../../../../src/gpu/marketplace/vastai/vastai-wire.js";
import { filterOffers } from "../../../../src/gpu/marketplace/offer-filter.js";

// vast.ai shows GPU memory as the host's driver reports it; users name cards by their nominal size.

describe("GPU memory as users name it", () => {
  it.each([
    [23028, 24, "A10G"],
    [46068, 48, "L40S"],
    [24564, 24, "RTX 4090"],
    [81559, 80, "H100 SXM"],
    [95830, 94, "H100 NVL"],
    [15360, 16, "Tesla T4"],
    [11264, 11, "GTX 1080 Ti"],
    [12288, 12, "RTX 3060"],
    [10240, 10, "RTX 3080"],
    [40960, 40, "A100 40GB"],
  ])("snaps %i MB to %i GB (%s)", (mb, gb) => {
    expect(gigabytes(mb)).toBe(gb);
  });

  it("rounds a size that is near no nominal one to whole GB", () => {
    expect(gigabytes(28 * 1024)).toBe(28);
  });

  it("bounds the search so that every card snapping to the floor is found, and the floor then holds", () => {
    expect(23028).toBeGreaterThanOrEqual(minMegabytes(24));
    expect(46068).toBeGreaterThanOrEqual(minMegabytes(48));
    const offers = parseOffers({
      offers: [
        { id: 1, gpu_name: "A10", num_gpus: 1, gpu_ram: 23028, dph_total: 0.3, rentable: true },
        { id: 2, gpu_name: "RTX 4080", num_gpus: 1, gpu_ram: 16376, dph_total: 0.2, rentable: true },
      ],
    });
    expect(offers.map((o) => o.gpuRam)).toEqual([24, 16]);
    expect(filterOffers(offers, { minGpuRam: 24 }).map((o) => o.id)).toEqual(["1"]);
  });
});

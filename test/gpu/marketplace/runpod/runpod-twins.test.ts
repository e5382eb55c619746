import { describe, expect, it } from "vitest";
import type { MarketInstance } from "../../../../src/gpu/marketplace/port.js";
import { createTwinWatch, TWIN_WATCH_MS } from "../../../../src/gpu/marketplace/runpod/runpod-twins.js";

const pod = (id: string, label: string) => ({ id, label }) as MarketInstance;
const ids = (pods: MarketInstance[]) => pods.map((p) => p.id);

describe("the twin watch of labels whose create lost an answer", () => {
  it("keeps the pod the service got and drops the others of its label", () => {
    const watch = createTwinWatch();
    watch.lost("gpu-1");
    watch.kept("gpu-1", "b");
    const { pods, twins } = watch.sift([pod("a", "gpu-1"), pod("b", "gpu-1"), pod("c", "gpu-2")]);
    expect(ids(pods)).toEqual(["b", "c"]);
    expect(ids(twins)).toEqual(["a"]);
  });

  it("keeps the first listed while nothing is known, and the same one in later listings", () => {
    const watch = createTwinWatch();
    watch.lost("gpu-1");
    expect(ids(watch.sift([pod("a", "gpu-1"), pod("b", "gpu-1")]).twins)).toEqual(["b"]);
    expect(ids(watch.sift([pod("b", "gpu-1"), pod("a", "gpu-1")]).pods)).toEqual(["a"]);
  });

  it("drops every pod of a label the service was told is not rented here", () => {
    const watch = createTwinWatch();
    watch.lost("gpu-1");
    watch.none("gpu-1");
    expect(ids(watch.sift([pod("a", "gpu-1")]).twins)).toEqual(["a"]);
  });

  it("leaves labels that never lost an answer alone, and forgets a watch after its time", () => {
    let now = 0;
    const watch = createTwinWatch(() => now);
    watch.kept("gpu-1", "a");
    expect(watch.sift([pod("a", "gpu-1"), pod("b", "gpu-1")]).twins).toEqual([]);
    watch.lost("gpu-2");
    watch.none("gpu-2");
    now = TWIN_WATCH_MS + 1;
    expect(watch.sift([pod("c", "gpu-2")]).twins).toEqual([]);
  });
});

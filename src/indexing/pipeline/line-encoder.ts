// Encodes bulk lines to UTF-8 as they arrive, into shared slabs. Encoding once gives each line's
// byte size for free (the bulk's byte bound needs it), the request body is a copy of the slices,
// and the line's string becomes garbage at once instead of living, and being traced by the
// garbage collector, until its bulk settles.

/**
 * Returns the UTF-8 bytes of the parts, one after the other: a view into a slab shared with the
 * lines around it. Parts spare the caller a concatenated copy of every document.
 */
export type LineEncoder = (...parts: string[]) => Buffer;

export function createLineEncoder(slabBytes = 1024 * 1024): LineEncoder {
  let slab = Buffer.allocUnsafeSlow(slabBytes);
  let used = 0;
  return (...parts) => {
    let units = 0;
    for (const part of parts) units += part.length;
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    const most = units * 3;
    if (most > slabBytes) return Buffer.from(parts.join(""));
    if (used + most > slabBytes) {
      slab = Buffer.allocUnsafeSlow(slabBytes);
      used = 0;
    }
    const start = used;
    for (const part of parts) used += slab.write(part, used);
    return slab.subarray(start, used);
  };
}

// Seeded randomness for tests that generate their inputs (fuzzers, chaos): every run prints its seed,
// and the same seed replays the same choices.

/** mulberry32: small, fast and good enough to spread inputs; seeded so a failure can be replayed. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** The seed from `env` (a replay) or a new one. */
export function seedFrom(value: string | undefined): number {
  if (value !== undefined && value !== "") {
    const seed = Number(value);
    if (!Number.isInteger(seed) || seed < 0)
      throw new Error(`a seed must be a whole number ≥ 0, got "${value}"`);
    return seed;
  }
  return Math.floor(Math.random() * 2 ** 31);
}

export interface Chooser {
  /** A number in [0, 1). */
  next(): number;
  /** A whole number in [0, n). */
  int(n: number): number;
  pick<T>(items: readonly T[]): T;
  chance(p: number): boolean;
}

export function chooser(seed: number): Chooser {
  const next = random(seed);
  const int = (n: number) => Math.floor(next() * n);
  return {
    next,
    int,
    pick: <T>(items: readonly T[]): T => {
      if (items.length === 0) throw new Error("pick from an empty list");
      return items[int(items.length)] as T;
    },
    chance: (p: number) => next() < p,
  };
}

// PostgreSQL's hashtext() in JavaScript: the 32-bit hash Citus distributes a text column by (the
// column type's default hash function). Knowing a key's hash here lets the store group a batch by
// the shard its keys live on without asking the server (shard-map.ts). It is PostgreSQL's hash_bytes
// (Bob Jenkins's lookup3, as src/common/hashfn.c has it) over the text's UTF-8 bytes, read as
// little-endian words — what every x86-64 and arm64 server computes; a server of the other byte
// order would hash differently, and then batches merely span shards (slower, still correct).
// test/unit/hash-text.test.ts compares it with the server's hashtext() for arbitrary strings.

const rotate = (x: number, k: number): number => (x << k) | (x >>> (32 - k));

/** A little-endian 32-bit word of `bytes` from `at`, the bytes past the end read as zero. */
function word(bytes: Uint8Array, at: number, length: number): number {
  let value = 0;
  for (let i = Math.min(3, length - at - 1); i >= 0; i--) value = (value << 8) | bytes[at + i]!;
  return value;
}

/** hashtext(text), as the signed int4 PostgreSQL returns (and pg_dist_shard's ranges are in). */
export function hashText(text: string): number {
  return hashBytes(Buffer.from(text, 'utf8'));
}

// lookup3's two mixing functions as steps over the state [a, b, c]: mix's step is
// `x -= z; x ^= rotate(z, r); z += y` and final's `z ^= y; z -= rotate(y, r)`, for these (x, y, z, r).
const A = 0;
const B = 1;
const C = 2;
const MIX = [
  [A, B, C, 4],
  [B, C, A, 6],
  [C, A, B, 8],
  [A, B, C, 16],
  [B, C, A, 19],
  [C, A, B, 4],
] as const;
const FINAL = [
  [C, B, 14],
  [A, C, 11],
  [B, A, 25],
  [C, B, 16],
  [A, C, 4],
  [B, A, 14],
  [C, B, 24],
] as const;

export function hashBytes(bytes: Uint8Array): number {
  const length = bytes.length;
  const state = new Int32Array(3).fill(0x9e3779b9 + length + 3923095);
  // Int32Array arithmetic wraps at 32 bits, as the C does on uint32.
  const at = (i: number): number => state[i]!;
  const add = (i: number, value: number): void => void (state[i] = at(i) + value);
  let offset = 0;
  for (; length - offset >= 12; offset += 12) {
    add(A, word(bytes, offset, length));
    add(B, word(bytes, offset + 4, length));
    add(C, word(bytes, offset + 8, length));
    for (const [x, y, z, r] of MIX) {
      add(x, -at(z));
      state[x] = at(x) ^ rotate(at(z), r);
      add(z, at(y));
    }
  }
  // The last 0–11 bytes: the first four into a, the next four into b, the rest into c above its
  // lowest byte (which lookup3 keeps for the length).
  const left = length - offset;
  if (left > 0) add(A, word(bytes, offset, length));
  if (left > 4) add(B, word(bytes, offset + 4, length));
  if (left > 8) add(C, word(bytes, offset + 8, length) << 8);
  for (const [z, y, r] of FINAL) {
    state[z] = at(z) ^ at(y);
    add(z, -rotate(at(y), r));
  }
  return at(C);
}

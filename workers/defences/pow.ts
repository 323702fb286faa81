// Proof of work (an optional cost on top of the captcha): the client finds a nonce such that
// SHA-256(prefix + nonce) starts with `difficulty` zero bits. Each extra bit doubles the
// expected work (2^difficulty hashes on average); checking it costs one hash.

const encoder = new TextEncoder();

/** The algorithm name sent to clients with each challenge. */
export const POW_ALGORITHM = 'sha256-leading-zero-bits';

/** Leading zero bits of a digest. */
export function leadingZeroBits(bytes: Uint8Array): number {
  let bits = 0;
  for (const byte of bytes) {
    if (byte === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}

async function digest(prefix: string, nonce: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(prefix + nonce)));
}

/** True when `nonce` solves the challenge `prefix` at `difficulty`. */
export async function verifyPow(prefix: string, nonce: string, difficulty: number): Promise<boolean> {
  return difficulty <= 0 || leadingZeroBits(await digest(prefix, nonce)) >= difficulty;
}

/** Finds a nonce (what a client does; used by tests and tools). */
export async function solvePow(prefix: string, difficulty: number, maxTries = 2 ** 28): Promise<string> {
  for (let i = 0; i < maxTries; i++) {
    const nonce = i.toString(36);
    if (leadingZeroBits(await digest(prefix, nonce)) >= difficulty) {
      return nonce;
    }
  }
  throw new Error(`no nonce within ${maxTries} tries`);
}

// Proof of work (an optional cost on top of the captcha): the client finds a nonce such that
// SHA-256(prefix + nonce) starts with `difficulty` zero bits. Each extra bit doubles the
// expected work (2^difficulty hashes on average); checking it costs one hash.
//
// One module for both sides: the Worker verifies with it, the shopper page and the tools
// solve with it, so the algorithm and its bit count cannot drift apart. It imports nothing,
// so the page can bundle it.

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

/**
 * Searches for a nonce; undefined when `cancelled` says stop (a page whose challenge was
 * replaced) or after `maxTries`. Each digest is awaited, so a page stays responsive.
 */
export async function searchPow(
  prefix: string,
  difficulty: number,
  cancelled: () => boolean = () => false,
  maxTries = 2 ** 30,
): Promise<string | undefined> {
  for (let i = 0; i < maxTries; i++) {
    if (i % 1024 === 0 && cancelled()) {
      return undefined;
    }
    const nonce = i.toString(36);
    if (leadingZeroBits(await digest(prefix, nonce)) >= difficulty) {
      return nonce;
    }
  }
  return undefined;
}

/** Finds a nonce or throws (tests and tools, which have nothing to cancel). */
export async function solvePow(prefix: string, difficulty: number, maxTries = 2 ** 28): Promise<string> {
  const nonce = await searchPow(prefix, difficulty, undefined, maxTries);
  if (nonce === undefined) {
    throw new Error(`no nonce within ${maxTries} tries`);
  }
  return nonce;
}

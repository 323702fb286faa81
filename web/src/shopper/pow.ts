// The proof of work a challenge may ask for (when the operator turns it on): find a nonce
// such that SHA-256(prefix + nonce) starts with `difficulty` zero bits. The page solves it
// while the shopper reads the captcha, so it rarely adds to the click.

export const POW_ALGORITHM = 'sha256-leading-zero-bits';
const encoder = new TextEncoder();

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

/**
 * Finds a nonce. Each digest is awaited, so the page stays responsive; `cancelled` stops a
 * search whose challenge was replaced.
 */
export async function solvePow(prefix: string, difficulty: number, cancelled: () => boolean = () => false): Promise<string | undefined> {
  for (let i = 0; i < 2 ** 30; i++) {
    if (i % 1024 === 0 && cancelled()) {
      return undefined;
    }
    const nonce = i.toString(36);
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(prefix + nonce)));
    if (leadingZeroBits(digest) >= difficulty) {
      return nonce;
    }
  }
  return undefined;
}

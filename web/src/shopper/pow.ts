// The proof of work a challenge may ask for (when the operator turns it on): find a nonce
// such that SHA-256(prefix + nonce) starts with `difficulty` zero bits. The page solves it
// while the shopper reads the captcha, so it rarely adds to the click.

// The algorithm's name and its bit count are the Worker's own, so the page and the check agree.
import { leadingZeroBits } from '../../../workers/defences/pow';

export { leadingZeroBits, POW_ALGORITHM } from '../../../workers/defences/pow';

const encoder = new TextEncoder();

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

// The proof of work a challenge may ask for (when the operator turns it on): find a nonce
// such that SHA-256(prefix + nonce) starts with `difficulty` zero bits. The page solves it
// while the shopper reads the captcha, so it rarely adds to the click.
//
// The solver, the algorithm's name and its bit count are the Worker's own module, so the
// page and the check agree by construction. `solvePow` here is the cancellable search.
export { leadingZeroBits, POW_ALGORITHM, searchPow as solvePow } from '../../../workers/kernel/pow';

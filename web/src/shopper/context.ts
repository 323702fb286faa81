import type { ServerClock } from '../shared/clock';
import type { I18n } from '../shared/i18n';
import type { ShopperKey } from './messages';
import type { Session } from './session';

/** What the shopper page's parts share. */
export type ShopperContext = {
  i18n: I18n<ShopperKey>;
  clock: ServerClock;
  /** ISO 4217 code from `<meta name="currency">`. */
  currency: string;
  session(): Session | undefined;
  /** A call answered 401: the session is no longer valid. */
  sessionExpired(): void;
  /** Moves keyboard focus to the sign-in field (the buy button's action when signed out). */
  focusSignIn(): void;
};

export { sleep } from '../../../workers/kernel/sleep';

/** A random Idempotency-Key; randomUUID needs a secure context, so fall back to raw bytes. */
export function newKey(): string {
  if (typeof crypto.randomUUID === 'function') {
    return crypto.randomUUID();
  }
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** localStorage keys for what survives a reload: the pending request and the order. */
export const storageKeys = {
  pending: (userId: string, goodsId: number) => `seckill:pending:${userId}:${goodsId}`,
  order: (userId: string, goodsId: number) => `seckill:order:${userId}:${goodsId}`,
};

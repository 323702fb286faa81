import { type ApiFail, callJson } from '../shared/api';
import { PurchaseToken, Queued, Result } from '../shared/contract';
import { byId, loadLocal, saveLocal, setBusy } from '../shared/dom';
import type { SaleState } from '../shared/sale';
import { Captcha } from './captcha';
import { newKey, type ShopperContext, sleep, storageKeys } from './context';
import type { GoodsView } from './goods-view';
import { REASON_KEYS, type ShopperKey } from './messages';
import {
  ClickGuard,
  heldReadTimeoutMs,
  LocalLimiter,
  POLL_GIVE_UP_MS,
  resultPollPause,
  resultReadPath,
  STILL_QUEUED_AFTER_MS,
  sendWhileBusy,
} from './pacing';
import type { QueueView } from './queue-view';
import type { RulesView } from './rules-view';
import type { Session } from './session';

/** The header the token route reads the waiting room's admission pass from. */
const PASS_HEADER = 'X-Admission-Pass';

/** A purchase ticket in hand: kept across BUSY / network failures so a retry replays it. */
type Attempt = { userId: string; key: string; token: string; path: string; quantity: number | undefined };
type Phase = 'idle' | 'sending' | 'queued';

/** Failures after which the same ticket and Idempotency-Key may be sent again. */
function retryable(fail: ApiFail): boolean {
  return fail.status === 0 || fail.status === 429 || fail.status >= 500;
}

/**
 * The buy button and what follows it: captcha -> one-time token -> purchase (202) -> the
 * result, polled every second ten times, then with backoff. A goods with a waiting room
 * first waits for the admission, sends its pass with the token request, and hears the result
 * on the room's live channel instead of polling.
 */
export class BuyFlow {
  private readonly guard = new ClickGuard();
  private readonly limiter = new LocalLimiter();
  private readonly captcha: Captcha;
  private phase: Phase = 'idle';
  private attempt: Attempt | undefined;
  private holdsOrder = false;
  private readonly els = {
    form: byId('buy-form', HTMLFormElement),
    button: byId('buy', HTMLButtonElement),
    label: byId('buy-label', HTMLElement),
    status: byId('status', HTMLElement),
    alert: byId('alert', HTMLElement),
  };

  constructor(
    private readonly ctx: ShopperContext,
    private readonly view: GoodsView,
    private readonly onOrder: (orderId: string) => void,
    private readonly queue: QueueView,
    private readonly rules: RulesView,
  ) {
    this.captcha = new Captcha(ctx, view.goodsId);
    this.els.form.addEventListener('submit', (event) => {
      event.preventDefault();
      void this.submit();
    });
  }

  /** Called every second and when the sale's state changes. */
  update(state: SaleState | undefined): void {
    const session = this.ctx.session();
    const live = state === 'ON_SALE' || (state === 'UPCOMING' && (this.view.goods?.startAt ?? 0) - this.ctx.clock.now() < 4 * 60_000);
    const waiting = this.queue.holding() || this.rules.blocked();
    // A live order ends the shopper's buying, unless the goods lets them hold more units.
    const done = this.holdsOrder && !this.rules.moreAllowed();
    this.els.form.hidden = done;
    this.captcha.setWanted(Boolean(session) && live && !waiting && !done && this.phase === 'idle');
    this.render(state);
  }

  /** Hides the form while the shopper holds a live order for this goods (and may not buy more). */
  setHoldsOrder(holds: boolean): void {
    this.holdsOrder = holds;
    this.update(this.view.state());
  }

  /** Picks up a purchase left queued by a reload. */
  resume(session: Session): void {
    const requestId = loadLocal(storageKeys.pending(session.userId, this.view.goodsId));
    if (requestId && this.phase === 'idle' && this.guard.tryEnter()) {
      this.phase = 'queued';
      this.say('statusQueued');
      void this.poll(session, requestId).finally(() => this.done());
    }
  }

  /** Forgets per-shopper state (sign-out or another shopper signing in). */
  reset(): void {
    this.attempt = undefined;
    this.limiter.reset();
    this.say();
    this.alert();
  }

  private render(state: SaleState | undefined): void {
    const { button, label } = this.els;
    const wait = this.limiter.waitMs();
    let key: ShopperKey = 'buyNow';
    let disabled = false;
    if (this.phase === 'sending') {
      key = 'buying';
      disabled = true;
    } else if (this.phase === 'queued') {
      key = 'queuedButton';
      disabled = true;
    } else if (!this.ctx.session()) {
      key = 'buySignIn';
    } else if (state !== 'ON_SALE') {
      key = state === 'SOLD_OUT' ? 'buySoldOut' : state === 'ENDED' ? 'buyEnded' : state === 'PAUSED' ? 'buyPaused' : 'buyStartsSoon';
      disabled = true;
    } else if (this.rules.blocked()) {
      key = 'buyNow';
      disabled = true;
    } else if (this.queue.holding()) {
      key = 'buyInLine';
      disabled = true;
    } else if (wait > 0) {
      key = 'retryIn';
      disabled = true;
    }
    label.textContent = this.ctx.i18n.t(key, { s: Math.ceil(wait / 1000) });
    button.setAttribute('aria-disabled', String(disabled));
    button.classList.toggle('is-busy', this.phase !== 'idle');
  }

  private async submit(): Promise<void> {
    const session = this.ctx.session();
    if (!session) {
      this.ctx.focusSignIn();
      return;
    }
    // Everything that can make the button inactive is checked before the guard, so an
    // ignored click leaves no trace; the guard then drops repeats within 300 ms.
    const waiting = this.queue.holding() || this.rules.blocked();
    if (this.phase !== 'idle' || waiting || this.view.state() !== 'ON_SALE' || !this.guard.tryEnter()) {
      return;
    }
    this.phase = 'sending';
    this.render(this.view.state());
    try {
      await this.purchase(session);
    } finally {
      this.done();
    }
  }

  private done(): void {
    this.guard.release();
    this.phase = 'idle';
    setBusy(this.els.button, false);
    this.update(this.view.state());
  }

  private async purchase(session: Session): Promise<void> {
    this.alert();
    const wait = this.limiter.waitMs();
    if (wait > 0) {
      this.alert('reasonLOCAL_LIMIT', { s: Math.ceil(wait / 1000) });
      return;
    }
    this.say('statusSending');
    let attempt = this.attempt?.userId === session.userId ? this.attempt : undefined;
    if (!attempt) {
      attempt = await this.takeTicket(session);
      if (!attempt) {
        this.say();
        return;
      }
      this.attempt = attempt;
    }
    this.limiter.note();
    const res = await callJson(`/api/seckill/do/${encodeURIComponent(attempt.path)}`, Queued, {
      method: 'POST',
      auth: session.token,
      headers: { 'Idempotency-Key': attempt.key },
      body: { goodsId: this.view.goodsId, token: attempt.token, ...(attempt.quantity ? { quantity: attempt.quantity } : {}) },
    });
    if (!res.ok) {
      if (!retryable(res)) {
        this.attempt = undefined;
      }
      this.say();
      this.fail(res);
      return;
    }
    this.attempt = undefined;
    saveLocal(storageKeys.pending(session.userId, this.view.goodsId), res.data.requestId);
    this.phase = 'queued';
    this.render(this.view.state());
    this.say('statusQueued');
    await this.poll(session, res.data.requestId);
  }

  /**
   * Answers the captcha and exchanges it for a one-time token and hidden path. A 503 (the sale
   * busy, a part of it restarting) comes before the challenge is spent or after it was given
   * back: the same answer is sent again (sendWhileBusy).
   */
  private async takeTicket(session: Session): Promise<Attempt | undefined> {
    const answer = await this.captcha.takeAnswer();
    if (!answer.ok) {
      this.alert(answer.reason);
      this.captcha.focus();
      return undefined;
    }
    const pass = this.queue.pass();
    const ask = () =>
      callJson(`/api/seckill/goods/${this.view.goodsId}/token`, PurchaseToken, {
        method: 'POST',
        auth: session.token,
        body: answer.body,
        ...(pass ? { headers: { [PASS_HEADER]: pass } } : {}),
      });
    const sent = await sendWhileBusy(ask, async (ms) => {
      this.say('statusBusyRetry', { s: Math.ceil(ms / 1000) });
      await sleep(ms);
      this.say('statusSending');
      return this.ctx.session()?.userId === session.userId;
    });
    if (!sent) {
      return undefined;
    }
    const { answer: res, sends } = sent;
    if (!res.ok) {
      if (res.code === 'CAPTCHA_FAILED') {
        // After a busy answer the challenge may have been spent all the same: the answer was
        // not wrong, the question is new.
        this.alert(sends > 1 ? 'captchaAnswerAgain' : 'captchaWrong');
        this.captcha.focus();
      } else if (res.status === 503) {
        this.alert('reasonBUSY_CHECK');
        this.captcha.focus();
      } else {
        this.fail(res);
      }
      return undefined;
    }
    return { userId: session.userId, key: newKey(), token: res.data.token, path: res.data.path, quantity: this.rules.quantity() };
  }

  private async poll(session: Session, requestId: string): Promise<void> {
    const pendingKey = storageKeys.pending(session.userId, this.view.goodsId);
    const live = this.queue.awaitResult(requestId);
    if (live) {
      const result = await this.hear(live, requestId);
      if (this.ctx.session()?.userId !== session.userId) {
        return;
      }
      if (!result) {
        this.say('statusGaveUp');
      } else if (result.status === 'SUCCESS' && result.orderId) {
        saveLocal(pendingKey, undefined);
        this.say('success');
        this.onOrder(result.orderId);
      } else {
        saveLocal(pendingKey, undefined);
        this.say();
        this.fail({ ok: false, status: 200, code: result.reason ?? 'ORDER_FAILED', message: result.reason ?? '', requestId });
      }
      return;
    }
    const started = Date.now();
    let saidStillQueued = false;
    for (let attempt = 0; ; attempt++) {
      if (this.ctx.session()?.userId !== session.userId) {
        return;
      }
      // The first poll goes at once: the server holds it until the order is written.
      const sentAt = Date.now();
      const res = await callJson(resultReadPath(requestId), Result, { auth: session.token, timeoutMs: heldReadTimeoutMs() });
      if (this.ctx.session()?.userId !== session.userId) {
        return;
      }
      if (res.ok && res.data.status === 'SUCCESS' && res.data.orderId) {
        saveLocal(pendingKey, undefined);
        this.say('success');
        this.onOrder(res.data.orderId);
        return;
      }
      if (res.ok && res.data.status === 'FAIL') {
        saveLocal(pendingKey, undefined);
        this.say();
        this.fail({ ok: false, status: 200, code: res.data.reason ?? 'ORDER_FAILED', message: res.data.reason ?? '', requestId });
        return;
      }
      if (!res.ok && (res.status === 401 || res.status === 404 || res.status === 400)) {
        saveLocal(pendingKey, undefined);
        this.say();
        this.fail(res);
        return;
      }
      if (!saidStillQueued && Date.now() - started >= STILL_QUEUED_AFTER_MS) {
        saidStillQueued = true;
        this.say('statusStillQueued');
      }
      if (Date.now() - started > POLL_GIVE_UP_MS) {
        this.say('statusGaveUp');
        return;
      }
      const retryAfterMs = !res.ok && res.retryAfterSeconds ? res.retryAfterSeconds * 1000 : 0;
      await sleep(Math.max(retryAfterMs, resultPollPause(attempt, Date.now() - sentAt)));
    }
  }

  /** The live channel's result, or undefined once POLL_GIVE_UP_MS pass without one. */
  private async hear(live: Promise<Result>, requestId: string): Promise<Result | undefined> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const giveUp = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), POLL_GIVE_UP_MS);
    });
    const result = await Promise.race([live, giveUp]);
    clearTimeout(timer);
    if (!result) {
      this.queue.forget(requestId);
    }
    return result;
  }

  /** Shows why a step failed, and adjusts the page to it. */
  private fail(fail: ApiFail): void {
    if (fail.code === 'UNAUTHENTICATED') {
      this.ctx.sessionExpired();
      return;
    }
    if (fail.code === 'SOLD_OUT' && fail.remaining) {
      // Fewer units left than asked for: refused whole, the rest is still on sale.
      this.alert('reasonSOLD_OUT_LEFT', { n: fail.remaining });
      void this.view.refresh();
      return;
    }
    if (fail.code === 'SOLD_OUT') {
      this.view.markSoldOut();
    } else if (fail.code === 'ENDED' || fail.code === 'PAUSED' || fail.code === 'NOT_STARTED') {
      void this.view.refresh();
    } else if (fail.code === 'TOKEN_INVALID') {
      this.attempt = undefined;
    } else if (fail.code === 'NOT_ADMITTED') {
      this.queue.notAdmitted();
    } else if (fail.code === 'NOT_ELIGIBLE') {
      this.rules.markNotEligible();
    } else if (fail.code === 'LIMIT_REACHED') {
      this.rules.recount();
    }
    // The server's pause (a 429, a ban, a 503 of a busy sale) holds the button as long.
    const pauseS = fail.code === 'RATE_LIMITED' ? (fail.retryAfterSeconds ?? 5) : fail.retryAfterSeconds;
    if (pauseS) {
      this.limiter.note(pauseS * 1000);
    }
    if (fail.code === 'RATE_LIMITED') {
      this.alert('reasonRATE_LIMITED', { s: pauseS ?? 5 });
      return;
    }
    const key = REASON_KEYS[fail.code] ?? (fail.status >= 500 ? 'reasonBUSY' : undefined);
    if (key) {
      this.alert(key);
    } else {
      this.alert('reasonUNKNOWN', { message: fail.message || fail.code });
    }
  }

  private say(key?: ShopperKey, vars?: Record<string, string | number>): void {
    this.els.status.textContent = key ? this.ctx.i18n.t(key, vars) : '';
  }

  private alert(key?: ShopperKey, vars?: Record<string, string | number>): void {
    this.els.alert.textContent = key ? this.ctx.i18n.t(key, vars) : '';
  }
}

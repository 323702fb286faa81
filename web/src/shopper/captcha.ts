import { callJson } from '../shared/api';
import { Challenge } from '../shared/contract';
import { byId } from '../shared/dom';
import type { ShopperContext } from './context';
import type { ShopperKey } from './messages';
import { POW_ALGORITHM, solvePow } from './pow';

/** Fetch a new challenge when the current one has less than this left. */
const RENEW_BEFORE_MS = 15_000;
const RETRY_AFTER_FAILURE_MS = 5_000;
const TURNSTILE_SCRIPT = 'https://challenges.cloudflare.com/turnstile/v0/api.js?render=explicit';

type TurnstileApi = {
  render(
    el: HTMLElement,
    options: {
      sitekey: string;
      language?: string;
      callback: (token: string) => void;
      'expired-callback'?: () => void;
      'error-callback'?: () => void;
    },
  ): string;
  reset(widgetId?: string): void;
};
declare global {
  interface Window {
    turnstile?: TurnstileApi;
  }
}

type AnswerBody = ({ challengeId: string; answer: string } | { turnstileToken: string; challengeId: string }) & { powNonce?: string };
export type Answer = { ok: true; body: AnswerBody } | { ok: false; reason: ShopperKey };

let turnstileLoading: Promise<TurnstileApi | undefined> | undefined;
function loadTurnstile(): Promise<TurnstileApi | undefined> {
  turnstileLoading ??= new Promise((resolve) => {
    const script = document.createElement('script');
    script.src = TURNSTILE_SCRIPT;
    script.async = true;
    script.onload = () => resolve(window.turnstile);
    script.onerror = () => {
      turnstileLoading = undefined;
      resolve(undefined);
    };
    document.head.append(script);
  });
  return turnstileLoading;
}

/**
 * The security check before a purchase: a challenge fetched ahead of the click (so the
 * click costs no extra round trip for it), renewed before it expires, spent by each try.
 */
export class Captcha {
  private challenge: Challenge | undefined;
  private loading = false;
  private retryAt = 0;
  private wanted = false;
  private turnstileWidget: string | undefined;
  private turnstileToken: string | undefined;
  /** The proof of work of the current challenge, being solved or solved. */
  private pow: Promise<string | undefined> | undefined;
  private readonly els = {
    box: byId('captcha', HTMLElement),
    label: byId('captcha-label', HTMLLabelElement),
    input: byId('captcha-answer', HTMLInputElement),
    turnstile: byId('turnstile', HTMLElement),
  };

  constructor(
    private readonly ctx: ShopperContext,
    private readonly goodsId: number,
  ) {
    ctx.i18n.onChange(() => this.render());
  }

  /** Whether a challenge should be ready (signed in, sale on or about to start). */
  setWanted(wanted: boolean): void {
    this.wanted = wanted;
    if (!wanted) {
      this.els.box.hidden = true;
      return;
    }
    const expiring = this.challenge && this.challenge.expiresAt - this.ctx.clock.now() < RENEW_BEFORE_MS;
    if ((!this.challenge || expiring) && !this.loading && Date.now() >= this.retryAt) {
      void this.load();
    }
    this.els.box.hidden = false;
  }

  focus(): void {
    if (!this.els.input.hidden) {
      this.els.input.focus();
    }
  }

  /** The shopper's answer to the current challenge, which is spent by this call. */
  async takeAnswer(): Promise<Answer> {
    if (!this.challenge) {
      await this.load();
    }
    const challenge = this.challenge;
    if (!challenge) {
      return { ok: false, reason: 'captchaFailedLoad' };
    }
    let answer: Answer;
    if (challenge.kind === 'turnstile') {
      answer = this.turnstileToken
        ? { ok: true, body: { turnstileToken: this.turnstileToken, challengeId: challenge.challengeId } }
        : { ok: false, reason: 'captchaMissing' };
    } else if (typeof challenge.prompt === 'string') {
      const value = this.els.input.value.trim();
      answer = value ? { ok: true, body: { challengeId: challenge.challengeId, answer: value } } : { ok: false, reason: 'captchaMissing' };
    } else {
      answer = { ok: false, reason: 'captchaUnsupported' };
    }
    if (answer.ok && challenge.pow) {
      const nonce = await this.pow;
      if (!nonce) {
        return { ok: false, reason: 'captchaUnsupported' };
      }
      answer.body.powNonce = nonce;
    }
    if (answer.ok) {
      // One challenge, one try: fetch the next one now so a retry is ready.
      this.challenge = undefined;
      this.turnstileToken = undefined;
      this.els.input.value = '';
      void this.load();
    }
    return answer;
  }

  private async load(): Promise<void> {
    if (this.loading) {
      return;
    }
    const session = this.ctx.session();
    if (!session) {
      return;
    }
    this.loading = true;
    this.render();
    try {
      const res = await callJson(`/api/seckill/goods/${this.goodsId}/challenge`, Challenge, { method: 'POST', auth: session.token });
      if (res.ok) {
        // A renewed challenge asks a new question: an answer typed for the old one is void.
        this.els.input.value = '';
        this.challenge = res.data;
        this.retryAt = 0;
        this.pow = this.startPow(res.data);
      } else if (res.code === 'UNAUTHENTICATED') {
        this.ctx.sessionExpired();
      } else {
        this.retryAt = Date.now() + (res.retryAfterSeconds ? res.retryAfterSeconds * 1000 : RETRY_AFTER_FAILURE_MS);
      }
    } finally {
      this.loading = false;
    }
    this.render();
  }

  /** Starts solving the challenge's proof of work, if it has one this page can solve. */
  private startPow(challenge: Challenge): Promise<string | undefined> | undefined {
    const pow = challenge.pow;
    if (!pow) {
      return undefined;
    }
    if (pow.algorithm !== POW_ALGORITHM) {
      return Promise.resolve(undefined);
    }
    return solvePow(pow.prefix, pow.difficulty, () => this.challenge !== challenge);
  }

  private render(): void {
    const { i18n } = this.ctx;
    const { label, input, turnstile } = this.els;
    const challenge = this.challenge;
    if (!challenge) {
      label.textContent = i18n.t(this.loading || this.retryAt === 0 ? 'captchaLoading' : 'captchaFailedLoad');
      input.hidden = true;
      turnstile.hidden = true;
      return;
    }
    if (challenge.kind === 'turnstile' && challenge.siteKey) {
      label.textContent = i18n.t('captchaTurnstile');
      input.hidden = true;
      turnstile.hidden = false;
      void this.showTurnstile(challenge.siteKey);
      return;
    }
    turnstile.hidden = true;
    if (typeof challenge.prompt === 'string') {
      label.textContent = i18n.t('captchaAnswerLabel', { prompt: challenge.prompt });
      input.hidden = false;
    } else {
      label.textContent = i18n.t('captchaUnsupported');
      input.hidden = true;
    }
  }

  private async showTurnstile(siteKey: string): Promise<void> {
    const api = await loadTurnstile();
    if (!api || !this.wanted) {
      return;
    }
    if (this.turnstileWidget !== undefined) {
      api.reset(this.turnstileWidget);
      return;
    }
    this.turnstileWidget = api.render(this.els.turnstile, {
      sitekey: siteKey,
      language: this.ctx.i18n.lang === 'zh' ? 'zh-cn' : 'en',
      callback: (token) => {
        this.turnstileToken = token;
      },
      'expired-callback': () => {
        this.turnstileToken = undefined;
      },
    });
  }
}

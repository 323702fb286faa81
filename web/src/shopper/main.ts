import * as z from 'zod/mini';
import { callJson } from '../shared/api';
import { ServerClock } from '../shared/clock';
import { DevToken } from '../shared/contract';
import { byId } from '../shared/dom';
import { I18n } from '../shared/i18n';
import { BuyFlow } from './buy';
import { showCatalog } from './catalog';
import type { ShopperContext } from './context';
import { GoodsView } from './goods-view';
import { type ShopperKey, shopperMessages } from './messages';
import { OrderView } from './order-view';
import { QueueView } from './queue-view';
import { RulesView } from './rules-view';
import { clearSession, currentSession, loginUrl, saveSession, takeHandoff } from './session';

// The shopper page: `/` lists the sales, `/?goods=<id>` is one sale.

const UserIdInput = z.string().check(z.regex(/^[A-Za-z0-9_.:@-]{1,64}$/));
const GoodsParam = z.string().check(z.regex(/^[1-9][0-9]{0,15}$/));

const i18n = new I18n(shopperMessages);
i18n.apply(document);
i18n.bindToggle(byId('lang', HTMLButtonElement));
// A hand-over the page did not ask for could sign the shopper in as someone else: ask first.
takeHandoff((plan) =>
  window.confirm(
    plan.current
      ? i18n.t('handoffSwitch', { current: plan.current.userId, user: plan.session.userId })
      : i18n.t('handoffSignIn', { user: plan.session.userId }),
  ),
);

const els = {
  who: byId('who', HTMLElement),
  signOut: byId('sign-out', HTMLButtonElement),
  login: byId('login', HTMLElement),
  loginForm: byId('login-form', HTMLFormElement),
  userId: byId('user-id', HTMLInputElement),
  loginError: byId('login-error', HTMLElement),
  shopLogin: byId('shop-login', HTMLButtonElement),
  pageError: byId('page-error', HTMLElement),
};

const sessionListeners: Array<() => void> = [];

const ctx: ShopperContext = {
  i18n,
  clock: new ServerClock(),
  currency: document.querySelector<HTMLMetaElement>('meta[name="currency"]')?.content || 'CNY',
  session: currentSession,
  sessionExpired() {
    clearSession();
    renderSession();
    showLoginError('sessionExpired');
    for (const listener of sessionListeners) {
      listener();
    }
  },
  focusSignIn() {
    els.userId.focus();
  },
};

function showLoginError(key: ShopperKey | undefined): void {
  els.loginError.textContent = key ? i18n.t(key) : '';
}

function showPageError(text: string): void {
  els.pageError.textContent = text;
  els.pageError.hidden = false;
}

function renderSession(): void {
  const session = currentSession();
  els.login.hidden = Boolean(session);
  els.signOut.hidden = !session;
  els.who.hidden = !session;
  els.who.textContent = session ? i18n.t('signedInAs', { user: session.userId }) : '';
}

els.loginForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  const userId = UserIdInput.safeParse(els.userId.value.trim());
  if (!userId.success) {
    els.userId.setAttribute('aria-invalid', 'true');
    showLoginError('loginInvalid');
    els.userId.focus();
    return;
  }
  els.userId.removeAttribute('aria-invalid');
  const res = await callJson('/api/dev/token', DevToken, { method: 'POST', body: { userId: userId.data } });
  if (!res.ok) {
    // No dev sign-in on this deployment: the shop's login hands the session over instead.
    showLoginError(res.status === 404 ? 'loginUnavailable' : 'reasonUNKNOWN');
    return;
  }
  if (!saveSession(res.data.token)) {
    showLoginError('loginInvalid');
    return;
  }
  showLoginError(undefined);
  renderSession();
  for (const listener of sessionListeners) {
    listener();
  }
});

els.signOut.addEventListener('click', () => {
  clearSession();
  renderSession();
  for (const listener of sessionListeners) {
    listener();
  }
  els.userId.focus();
});

// The shop's own login, when configured: the page starts the sign-in, so it can tell its answer.
const shopLoginUrl = document.querySelector<HTMLMetaElement>('meta[name="login-url"]')?.content;
if (shopLoginUrl) {
  els.shopLogin.hidden = false;
  els.shopLogin.addEventListener('click', () => {
    location.assign(loginUrl(shopLoginUrl, `${location.origin}${location.pathname}${location.search}`));
  });
}

i18n.onChange(renderSession);
renderSession();

async function showGoods(goodsId: number): Promise<void> {
  let order: OrderView | undefined;
  let buy: BuyFlow | undefined;
  let queue: QueueView | undefined;
  let rules: RulesView | undefined;
  const view = new GoodsView(ctx, goodsId, (state) => {
    queue?.update(state);
    rules?.update();
    buy?.update(state);
    order?.tick();
  });
  queue = new QueueView(ctx, view, () => buy?.update(view.state()));
  rules = new RulesView(ctx, view, () => buy?.update(view.state()));
  buy = new BuyFlow(ctx, view, (orderId) => void order?.opened(orderId), queue, rules);
  order = new OrderView(ctx, view, (live) => buy?.setHoldsOrder(live));
  i18n.onChange(() => {
    view.renderStatic();
    view.tick();
  });

  const failure = await view.refresh();
  if (failure) {
    showPageError(i18n.t(failure.code === 'NOT_FOUND' ? 'reasonNOT_FOUND' : 'reasonUNKNOWN', { message: failure.message }));
    return;
  }
  view.startTicking();

  const onSession = () => {
    buy?.reset();
    const session = currentSession();
    if (session) {
      void order?.restore().then(() => buy?.resume(session));
    } else {
      order?.hide();
    }
    buy?.update(view.state());
  };
  sessionListeners.push(onSession);
  onSession();
}

const goodsParam = GoodsParam.safeParse(new URLSearchParams(location.search).get('goods') ?? '');
if (goodsParam.success) {
  void showGoods(Number(goodsParam.data));
} else {
  void showCatalog(ctx, showPageError);
}

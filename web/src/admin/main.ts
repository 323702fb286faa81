import { callJson } from '../shared/api';
import { ServerClock } from '../shared/clock';
import { type Goods, GoodsList, Stats } from '../shared/contract';
import { byId } from '../shared/dom';
import { formatTimeOfDay } from '../shared/format';
import { I18n } from '../shared/i18n';
import { type AdminContext, adminJson, adminText } from './context';
import { EdgeSourcesView } from './edge-sources';
import { bindCreate, bindLimits, bindReconcile } from './forms';
import { GoodsCard } from './goods-card';
import { type AdminKey, adminMessages } from './messages';
import { TrafficView } from './traffic';

// The ops dashboard (/admin): every sale's stock as the object, Postgres and the mirror
// see it, orders, the pipeline, request outcomes, and the operator's switches.

const REFRESH_MS = 2_000;
/** Cards shown at most (the most recent sales); each costs one stats call per refresh. */
const MAX_CARDS = 12;
const TOKEN_KEY = 'seckill:admin-token';

const i18n = new I18n(adminMessages);
i18n.apply(document);
i18n.bindToggle(byId('lang', HTMLButtonElement));

const els = {
  login: byId('login', HTMLElement),
  loginForm: byId('login-form', HTMLFormElement),
  token: byId('admin-token', HTMLInputElement),
  loginError: byId('login-error', HTMLElement),
  dash: byId('dash', HTMLElement),
  signOut: byId('sign-out', HTMLButtonElement),
  live: byId('live', HTMLInputElement),
  updated: byId('updated', HTMLElement),
  status: byId('dash-status', HTMLElement),
  cards: byId('goods-cards', HTMLElement),
  empty: byId('goods-empty', HTMLElement),
};

function storedToken(): string | undefined {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? undefined;
  } catch {
    return undefined;
  }
}

function storeToken(token: string | undefined): void {
  try {
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token);
    } else {
      sessionStorage.removeItem(TOKEN_KEY);
    }
  } catch {
    // Without storage the token lasts until the page is reloaded.
  }
}

let token = storedToken();
const cards = new Map<number, GoodsCard>();
let refreshTimer: ReturnType<typeof setTimeout> | undefined;
let refreshing = false;

const ctx: AdminContext = {
  i18n,
  clock: new ServerClock(),
  token: () => token,
  rejected() {
    signOut('tokenRejected');
  },
  say(text) {
    els.status.textContent = text;
  },
};
const traffic = new TrafficView(ctx);
const edgeSources = new EdgeSourcesView(ctx);

function signOut(reason?: AdminKey): void {
  token = undefined;
  storeToken(undefined);
  clearTimeout(refreshTimer);
  els.dash.hidden = true;
  els.signOut.hidden = true;
  els.login.hidden = false;
  els.loginError.textContent = reason ? i18n.t(reason) : '';
  els.token.focus();
}

function signIn(value: string): void {
  token = value;
  storeToken(value);
  els.login.hidden = true;
  els.dash.hidden = false;
  els.signOut.hidden = false;
  els.loginError.textContent = '';
  void refresh();
}

/** One refresh: the sales list, each sale's stats, the metrics; then the next one is scheduled. */
async function refresh(): Promise<void> {
  if (refreshing || !token) {
    return;
  }
  refreshing = true;
  clearTimeout(refreshTimer);
  try {
    const [list, metrics] = await Promise.all([callJson('/api/seckill/goods', GoodsList), adminText(ctx, '/admin/metrics')]);
    const at = Date.now();
    if (!token) {
      return;
    }
    const listed = new Map<number, Goods>();
    if (list.ok) {
      for (const g of list.data) {
        listed.set(g.goodsId, g);
        ctx.clock.add({ serverTime: g.serverTime, sentAt: list.sentAt, receivedAt: list.receivedAt });
      }
    } else {
      ctx.say(i18n.t('updateFailed', { message: list.message }));
    }
    for (const g of listed.values()) {
      if (!cards.has(g.goodsId)) {
        cards.set(g.goodsId, new GoodsCard(ctx, g));
      }
    }
    // Newest sales first; a sale that left the list (ended) keeps its card while there is room.
    const shown = [...cards.values()].sort((a, b) => b.goodsId - a.goodsId).slice(0, MAX_CARDS);
    const stats = await Promise.all(shown.map((card) => adminJson(ctx, `/admin/goods/${card.goodsId}/stats`, Stats)));
    if (!token) {
      return;
    }
    shown.forEach((card, i) => {
      const result = stats[i];
      if (result) {
        card.update(listed.get(card.goodsId), result, at);
      }
    });
    els.cards.replaceChildren(...shown.map((card) => card.root));
    els.empty.hidden = shown.length > 0;
    traffic.update(metrics, at);
    edgeSources.update(metrics, at);
    els.updated.textContent = i18n.t('updatedAt', { time: formatTimeOfDay(ctx.clock.now(), i18n.locale) });
  } finally {
    refreshing = false;
    schedule();
  }
}

function schedule(): void {
  clearTimeout(refreshTimer);
  if (token && els.live.checked) {
    refreshTimer = setTimeout(() => {
      if (document.visibilityState === 'visible') {
        void refresh();
      } else {
        schedule();
      }
    }, REFRESH_MS);
  }
}

els.loginForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const value = els.token.value.trim();
  if (value) {
    els.token.value = '';
    signIn(value);
  }
});
els.signOut.addEventListener('click', () => signOut());
els.live.addEventListener('change', () => (els.live.checked ? void refresh() : clearTimeout(refreshTimer)));
i18n.onChange(() => {
  for (const card of cards.values()) {
    card.render();
  }
});
bindLimits(ctx);
bindReconcile(ctx, () => void refresh());
bindCreate(ctx, () => void refresh());

if (token) {
  signIn(token);
} else {
  signOut();
}

import { callJson } from '../shared/api';
import { GoodsList } from '../shared/contract';
import { byId, el } from '../shared/dom';
import { formatDateTime, formatMoney, remainingPercent } from '../shared/format';
import { saleState } from '../shared/sale';
import type { ShopperContext } from './context';

/** The list of sales on or coming up, each linking to its page (`/?goods=<id>`). */
export async function showCatalog(ctx: ShopperContext, showError: (text: string) => void): Promise<void> {
  const root = byId('catalog', HTMLElement);
  const list = byId('catalog-list', HTMLUListElement);
  const empty = byId('catalog-empty', HTMLElement);
  const res = await callJson('/api/seckill/goods', GoodsList);
  if (!res.ok) {
    showError(ctx.i18n.t('reasonUNKNOWN', { message: res.message }));
    return;
  }
  const first = res.data[0];
  if (first) {
    ctx.clock.add({ serverTime: first.serverTime, sentAt: res.sentAt, receivedAt: res.receivedAt });
  }
  const render = () => {
    const { i18n } = ctx;
    const now = ctx.clock.now();
    list.replaceChildren(
      ...res.data.map((g) => {
        const state = saleState(g, now);
        const item = el('li', 'card');
        const img = el('img');
        img.src = g.imageUrl || '/img/goods-placeholder.svg';
        img.alt = '';
        img.width = 220;
        img.height = 220;
        img.loading = 'lazy';
        const link = el('a', '', g.title);
        link.href = `/?goods=${g.goodsId}`;
        const title = el('h2');
        title.append(link);
        const badge = el('span', 'badge', i18n.t(`status${state}`));
        badge.dataset.state = state;
        const price = el('p', 'price-row');
        price.append(el('span', 'price', formatMoney(g.priceCents, ctx.currency, i18n.locale)), ' ', badge);
        const pct = remainingPercent(Math.max(0, g.remaining), g.totalStock);
        const when =
          state === 'UPCOMING' ? i18n.t('startsAt', { time: formatDateTime(g.startAt, i18n.locale) }) : i18n.t('remainingPct', { pct });
        item.append(img, title, price, el('p', 'hint', when));
        return item;
      }),
    );
    empty.hidden = res.data.length > 0;
  };
  render();
  ctx.i18n.onChange(render);
  root.hidden = false;
}

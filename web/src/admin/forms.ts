import * as z from 'zod/mini';
import { timeOrderedKey } from '../../../workers/kernel/time-order';
import { routeMissing } from '../shared/api';
import { AnyJson, Goods, Limits } from '../shared/contract';
import { byId } from '../shared/dom';
import { type AdminContext, adminJson } from './context';

const LIMIT_FIELDS = ['perIpPerSecond', 'perUserPerSecond', 'admissionPerSecond', 'powDifficulty'] as const;

function input(form: HTMLFormElement, name: string): HTMLInputElement {
  const found = form.elements.namedItem(name);
  if (!(found instanceof HTMLInputElement)) {
    throw new Error(`form field ${name} is missing`);
  }
  return found;
}

function busy(button: HTMLElement | null, on: boolean): void {
  button?.setAttribute('aria-disabled', String(on));
  button?.classList.toggle('is-busy', on);
}

/** Edge limits: read when the section opens, saved as a patch of the fields that changed. */
export function bindLimits(ctx: AdminContext): void {
  const form = byId('limits-form', HTMLFormElement);
  const details = byId('limits-details', HTMLDetailsElement);
  const status = byId('limits-status', HTMLElement);
  let loaded: Partial<Record<(typeof LIMIT_FIELDS)[number], number>> = {};

  /** Shows the live limits; a field the operator typed in while they were on their way keeps what was typed. */
  const load = async () => {
    const typed = new Map(LIMIT_FIELDS.map((name) => [name, input(form, name).value]));
    const res = await adminJson(ctx, '/admin/limits', Limits);
    if (!res.ok) {
      status.textContent = routeMissing(res) ? ctx.i18n.t('limitsUnavailable') : ctx.i18n.t('failed', { message: res.message });
      return;
    }
    loaded = {};
    for (const name of LIMIT_FIELDS) {
      const value = res.data[name];
      const field = input(form, name);
      field.closest('label')?.toggleAttribute('hidden', value === undefined);
      if (typeof value === 'number') {
        loaded[name] = value;
        if (field.value === typed.get(name)) {
          field.value = String(value);
        }
      }
    }
    status.textContent = '';
  };
  details.addEventListener('toggle', () => {
    if (details.open) {
      void load();
    }
  });

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const patch: Record<string, number> = {};
    for (const name of LIMIT_FIELDS) {
      const field = input(form, name);
      const value = field.valueAsNumber;
      if (field.value !== '' && Number.isFinite(value) && value !== loaded[name]) {
        patch[name] = value;
      }
    }
    if (Object.keys(patch).length === 0) {
      status.textContent = ctx.i18n.t('saved');
      return;
    }
    const button = form.querySelector('button');
    busy(button, true);
    const res = await adminJson(ctx, '/admin/limits', Limits, { method: 'PUT', body: patch });
    busy(button, false);
    if (!res.ok) {
      status.textContent = routeMissing(res) ? ctx.i18n.t('limitsUnavailable') : ctx.i18n.t('failed', { message: res.message });
      return;
    }
    // "Saved" once the form shows what was saved, not before: a change typed before then
    // would be compared with the limits as they were.
    await load();
    status.textContent = ctx.i18n.t('saved');
  });
}

/** Runs reconciliation now and shows the report as the server wrote it. */
export function bindReconcile(ctx: AdminContext, after: () => void): void {
  const button = byId('reconcile', HTMLButtonElement);
  const panel = byId('reconcile-panel', HTMLElement);
  const report = byId('reconcile-report', HTMLElement);
  let running = false;
  button.addEventListener('click', async () => {
    if (running) {
      return;
    }
    running = true;
    busy(button, true);
    ctx.say(ctx.i18n.t('reconciling'));
    try {
      const res = await adminJson(ctx, '/admin/reconcile', AnyJson, { method: 'POST', body: {}, timeoutMs: 60_000 });
      if (!res.ok) {
        ctx.say(routeMissing(res) ? ctx.i18n.t('reconcileUnavailable') : ctx.i18n.t('failed', { message: res.message }));
        return;
      }
      report.textContent = JSON.stringify(res.data, null, 2);
      panel.hidden = false;
      const summary = ReconcileSummary.safeParse(res.data);
      ctx.say(
        summary.success
          ? ctx.i18n.t('reconcileSummary', {
              goods: summary.data.goods.length,
              discrepancies: summary.data.discrepancies,
              actions: summary.data.actions,
            })
          : ctx.i18n.t('reconcileDone'),
      );
      after();
    } finally {
      running = false;
      busy(button, false);
    }
  });
}

/** The report's headline numbers; the rest is shown as the server wrote it. */
const ReconcileSummary = z.looseObject({ goods: z.array(z.unknown()), discrepancies: z.number(), actions: z.number() });

const CreateInput = z.object({
  title: z.string().check(z.minLength(1), z.maxLength(200)),
  activityId: z.number().check(z.int(), z.minimum(0)),
  priceCents: z.number().check(z.int(), z.minimum(0)),
  stock: z.number().check(z.int(), z.minimum(0)),
  startAt: z.number(),
  duration: z.number().check(z.int(), z.minimum(1)),
});

/**
 * The new-sale form: POST /admin/goods, which also pre-warms the sale's object. Each fill of the
 * form has its own Idempotency-Key: pressing Create again after an answer that never came (a
 * timeout, a 503) answers the goods the first press made instead of making a second; an edit
 * of the form, or a goods made, starts a new key.
 */
export function bindCreate(ctx: AdminContext, created: () => void): void {
  const form = byId('create-form', HTMLFormElement);
  const status = byId('create-status', HTMLElement);
  let createKey = timeOrderedKey();
  form.addEventListener('input', () => {
    createKey = timeOrderedKey();
  });
  const start = input(form, 'startAt');
  const defaultStart = () => {
    // Five minutes from now on the server's clock, written as the device's local wall time.
    const at = new Date(ctx.clock.now() + 5 * 60_000);
    at.setSeconds(0, 0);
    start.value = new Date(at.getTime() - at.getTimezoneOffset() * 60_000).toISOString().slice(0, 19);
  };
  defaultStart();

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const parsed = CreateInput.safeParse({
      title: input(form, 'title').value.trim(),
      activityId: input(form, 'activityId').valueAsNumber,
      priceCents: Math.round(input(form, 'price').valueAsNumber * 100),
      stock: input(form, 'stock').valueAsNumber,
      startAt: new Date(start.value).getTime(),
      duration: input(form, 'duration').valueAsNumber,
    });
    if (!parsed.success) {
      const field = parsed.error.issues[0]?.path[0];
      status.textContent = ctx.i18n.t('failed', { message: `${String(field ?? 'form')}: ${parsed.error.issues[0]?.message ?? ''}` });
      return;
    }
    const { duration, ...body } = parsed.data;
    const imageUrl = input(form, 'imageUrl').value.trim();
    const button = form.querySelector('button');
    busy(button, true);
    const res = await adminJson(ctx, '/admin/goods', Goods, {
      method: 'POST',
      headers: { 'idempotency-key': createKey },
      body: { ...body, endAt: body.startAt + duration * 60_000, ...(imageUrl ? { imageUrl } : {}) },
    });
    busy(button, false);
    if (!res.ok) {
      status.textContent = ctx.i18n.t('failed', { message: res.message });
      return;
    }
    status.textContent = ctx.i18n.t('created', { id: res.data.goodsId });
    createKey = timeOrderedKey();
    form.reset();
    defaultStart();
    created();
  });
}

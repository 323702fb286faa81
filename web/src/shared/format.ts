// Formatting shared by both pages. Pure functions, so they are unit-tested in Node.

const pad = (n: number) => String(n).padStart(2, '0');

/**
 * A countdown as `HH:MM:SS` (with a day count when longer). Rounds up, so the display
 * reaches 00:00:00 exactly when the moment arrives, never a second early.
 */
export function formatCountdown(ms: number, dayWord = 'd'): string {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const days = Math.floor(total / 86_400);
  const h = Math.floor((total % 86_400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const hms = `${pad(h)}:${pad(m)}:${pad(s)}`;
  return days > 0 ? `${days}${dayWord} ${hms}` : hms;
}

/** A short `MM:SS` countdown for the payment window (minutes can exceed 59). */
export function formatMinutes(ms: number): string {
  const total = Math.max(0, Math.ceil(ms / 1000));
  return `${pad(Math.floor(total / 60))}:${pad(total % 60)}`;
}

/**
 * The remaining share of stock in whole percent, never shown as 0 % while a unit is left
 * nor 100 % once one is gone.
 */
export function remainingPercent(remaining: number, total: number): number {
  if (total <= 0 || remaining <= 0) {
    return 0;
  }
  if (remaining >= total) {
    return 100;
  }
  const pct = Math.round((remaining / total) * 100);
  return Math.min(99, Math.max(1, pct));
}

/** A price in cents in the page's currency. */
export function formatMoney(cents: number, currency: string, locale: string): string {
  try {
    return new Intl.NumberFormat(locale, { style: 'currency', currency }).format(cents / 100);
  } catch {
    // An unknown currency code in the page settings: show the number rather than nothing.
    return `${(cents / 100).toFixed(2)} ${currency}`;
  }
}

/** Wall-clock time of day (`HH:MM:SS`) of a server timestamp, in the viewer's time zone. */
export function formatTimeOfDay(ms: number, locale: string): string {
  return new Intl.DateTimeFormat(locale, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false }).format(ms);
}

/** Date and time, for sale windows and order times. */
export function formatDateTime(ms: number, locale: string): string {
  return new Intl.DateTimeFormat(locale, { dateStyle: 'medium', timeStyle: 'medium', hour12: false }).format(ms);
}

/**
 * A short delay for a dashboard: whole milliseconds below a second, tenths of a second above,
 * with the locale's digits; undefined when the delay is unknown (the caller shows a dash).
 */
export function formatDelay(ms: number | null | undefined, locale: string): { value: string; unit: 'ms' | 's' } | undefined {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) {
    return undefined;
  }
  if (Math.round(ms) < 1000) {
    return { value: new Intl.NumberFormat(locale).format(Math.round(ms)), unit: 'ms' };
  }
  return { value: new Intl.NumberFormat(locale, { minimumFractionDigits: 1, maximumFractionDigits: 1 }).format(ms / 1000), unit: 's' };
}

/** A number with grouping, or an em dash when it is unknown. */
export function formatCount(n: number | null | undefined, locale: string): string {
  return n === null || n === undefined || Number.isNaN(n) ? '—' : new Intl.NumberFormat(locale).format(n);
}

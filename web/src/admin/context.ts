import type * as z from 'zod/mini';
import { type ApiResult, type CallOptions, callJson, callText } from '../shared/api';
import type { ServerClock } from '../shared/clock';
import type { I18n } from '../shared/i18n';
import type { AdminKey } from './messages';

/** What the dashboard's parts share. */
export type AdminContext = {
  i18n: I18n<AdminKey>;
  clock: ServerClock;
  token(): string | undefined;
  /** An admin call answered 401: back to the token form. */
  rejected(): void;
  /** Announces an outcome in the page's status line (a live region). */
  say(text: string): void;
};

/** An admin JSON call with the token; a 401 signs the dashboard out. */
export async function adminJson<S extends z.ZodMiniType>(
  ctx: AdminContext,
  path: string,
  schema: S,
  options: CallOptions = {},
): Promise<ApiResult<z.infer<S>>> {
  const res = await callJson(path, schema, { ...options, auth: ctx.token() });
  if (!res.ok && res.status === 401) {
    ctx.rejected();
  }
  return res;
}

/** An admin text call (metrics) with the token. */
export async function adminText(ctx: AdminContext, path: string): Promise<ApiResult<string>> {
  const res = await callText(path, { auth: ctx.token() });
  if (!res.ok && res.status === 401) {
    ctx.rejected();
  }
  return res;
}

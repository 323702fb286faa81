import { zValidator } from '@hono/zod-validator';
import type { Context, MiddlewareHandler, ValidationTargets } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { z } from 'zod';
import { AppError } from '../../kernel/errors';
import type { AppEnv } from '../context';

function invalid(target: string, issues: readonly z.core.$ZodIssue[]): AppError {
  const issue = issues[0];
  const where = issue?.path.length ? `${issue.path.join('.')}: ` : '';
  return new AppError('INVALID_INPUT', `${target} ${where}${issue?.message ?? 'is invalid'}`);
}

/** zod validation for a route; a failure is the contract's 400 INVALID_INPUT naming the field. */
export function valid<T extends z.ZodType, Target extends keyof ValidationTargets>(target: Target, schema: T) {
  return zValidator(target, schema, (result) => {
    if (!result.success) {
      throw invalid(target, result.error.issues);
    }
  });
}

/** Media types Hono's validator reads as JSON. */
const JSON_MEDIA = /^application\/([\w.-]+\+)?json$/i;

/** A JSON body, read as Hono's validator reads it (an object only for a JSON media type). */
async function readJson(c: Context<AppEnv>): Promise<unknown> {
  const mediaType = (c.req.header('content-type') ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  if (!JSON_MEDIA.test(mediaType)) {
    return {};
  }
  try {
    return await c.req.json();
  } catch {
    throw new HTTPException(400, { message: 'Malformed JSON in request body' });
  }
}

/** A path's params, or the schema's own headers (every header of the request would be copied; the schema names the few it reads). */
function readNow(c: Context<AppEnv>, target: 'param' | 'header', schema: z.ZodType): unknown {
  if (target === 'param') {
    return c.req.param();
  }
  const headers: Record<string, string> = {};
  for (const name of Object.keys((schema as unknown as { shape: Record<string, unknown> }).shape)) {
    const value = c.req.header(name);
    if (value !== undefined) {
      headers[name] = value;
    }
  }
  return headers;
}

/** A step that reads a target, validates it and hands it to `keep`; see validInto. */
export type ValidStep<Target> = (c: Context<AppEnv>) => Target extends 'json' ? Promise<void> : void;

/**
 * validInto's work as a plain function, for a route that runs its steps itself (the purchase
 * route): synchronous for a path's params and headers, a promise only for a body.
 */
export function validStep<T extends z.ZodType, Target extends 'json' | 'param' | 'header'>(
  target: Target,
  schema: T,
  keep: (c: Context<AppEnv>, value: z.output<T>) => void,
  fast?: (value: unknown) => z.output<T> | undefined,
): ValidStep<Target> {
  const apply = (c: Context<AppEnv>, input: unknown) => {
    let value = fast?.(input);
    if (value === undefined) {
      const result = schema.safeParse(input);
      if (!result.success) {
        throw invalid(target, result.error.issues);
      }
      value = result.data;
    }
    c.req.addValidatedData(target, value as object);
    keep(c, value);
  };
  const step =
    target === 'json'
      ? async (c: Context<AppEnv>) => apply(c, await readJson(c))
      : (c: Context<AppEnv>) => apply(c, readNow(c, target as 'param' | 'header', schema));
  return step as ValidStep<Target>;
}

/**
 * Like valid, for a route's named steps: the parsed value goes to `keep`, which puts what later
 * steps need into the context. Reads the target as Hono's validator does and parses
 * synchronously, without the generic validator's copies of every header and its promise per
 * parse; a header schema must be an object of lower-case names.
 *
 * `fast`, when given, reads the common well-formed input without zod and returns what the
 * schema would, or undefined to leave the input to the schema (every refusal, with its message,
 * is still the schema's). workerd forbids code generation, so zod checks an object field by
 * field in its interpreter: about 3 µs of an object of three fields, on every purchase.
 */
export function validInto<T extends z.ZodType, Target extends 'json' | 'param' | 'header'>(
  target: Target,
  schema: T,
  keep: (c: Context<AppEnv>, value: z.output<T>) => void,
  fast?: (value: unknown) => z.output<T> | undefined,
): MiddlewareHandler<AppEnv> {
  const step: (c: Context<AppEnv>) => void | Promise<void> = validStep(target, schema, keep, fast);
  return async function validated(c, next) {
    await step(c);
    await next();
  };
}

import { bodyLimit } from 'hono/body-limit';
import { AppError } from '../../kernel/errors';

/** Request bodies are small JSON documents; anything larger is refused before parsing. */
export const MAX_BODY_BYTES = 16 * 1024;

/** 413 PAYLOAD_TOO_LARGE for a body over MAX_BODY_BYTES, before anything reads it. */
export const limitBody = bodyLimit({
  maxSize: MAX_BODY_BYTES,
  onError: () => {
    throw new AppError('PAYLOAD_TOO_LARGE', `request bodies are limited to ${MAX_BODY_BYTES} bytes`);
  },
});

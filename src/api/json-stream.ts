/**
 * A JSON answer written as it is read from the database, batch by batch, so that the API's memory
 * holds one batch whatever the number of items (a list of 100 000 leases is ~110 MB of JSON).
 *
 * The first batch is read before anything is sent: an error then is the usual error answer. Once
 * the 200 is sent, an error can no longer become one: the route's handler rejects and the error
 * handler ends the connection abruptly, so the client sees a broken body, never valid but
 * truncated JSON. The next batch is read only when the client has taken the previous one
 * (backpressure), and a client that goes away stops the reading.
 */
import type { Response } from 'express';

/** A client that takes nothing of the answer for this long is cut off: it holds the batch in memory meanwhile. */
const STALLED_CLIENT_MS = 60_000;

/** `{"<key>":[…]}` with the items of every batch, each turned into its JSON form by `format`. */
export async function* jsonArrayParts<T>(key: string, batches: AsyncIterable<T[]>, format: (item: T) => unknown): AsyncGenerator<string> {
  let text = `{${JSON.stringify(key)}:[`;
  let first = true;
  for await (const batch of batches) {
    for (const item of batch) {
      text += (first ? '' : ',') + JSON.stringify(format(item));
      first = false;
    }
    yield text;
    text = '';
  }
  yield `${text}]}`;
}

/** Sends the parts as one 200 JSON answer (see above for errors and slow or departing clients). */
export async function sendJsonParts(res: Response, parts: AsyncGenerator<string>): Promise<void> {
  let gone = false; // the client went away (before or during the answer)
  res.once('close', () => {
    gone = true;
  });
  let next = await parts.next(); // before the headers: an error here is an ordinary error answer
  res.status(200).type('application/json');
  try {
    while (!next.done) {
      if (gone || res.destroyed) return;
      if (!res.write(next.value) && !gone) await drained(res);
      next = await parts.next();
    }
    res.end();
  } finally {
    await parts.return(undefined); // stops the reading when the client went away (a no-op once done)
  }
}

/** Resolves when the client has taken what was written, or has gone; cuts off a client that takes nothing for STALLED_CLIENT_MS. */
function drained(res: Response): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    const timer = setTimeout(() => {
      res.destroy();
      done();
    }, STALLED_CLIENT_MS);
    res.on('drain', done);
    res.on('close', done);
  });
}

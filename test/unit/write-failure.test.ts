// What a failed write means for sending it again, read from the errors pg raises. The Citus rows are
// the errors a Citus 13 coordinator sent when a worker's session under it was terminated
// (citus.test.ts cuts them for real, under a storm).
import {
  isRelayedConnectionFailure,
  isRetryableWriteError,
  mayHaveCommitted,
} from '../../src/db/write-failure';

/** An error as pg builds it from a server's ErrorResponse. */
const pgError = (code: string, severity: string, message: string): Error =>
  Object.assign(new Error(message), { code, severity });

const cases: [
  string,
  Error,
  { retryable: boolean; mayHaveCommitted: boolean; relayed: boolean },
][] = [
  [
    'pg_terminate_backend of our own session (FATAL)',
    pgError('57P01', 'FATAL', 'terminating connection due to administrator command'),
    { retryable: true, mayHaveCommitted: true, relayed: false },
  ],
  [
    "Citus: the worker's session under the statement was terminated (passed on as ERROR)",
    pgError('57P01', 'ERROR', 'terminating connection due to administrator command'),
    { retryable: true, mayHaveCommitted: true, relayed: true },
  ],
  [
    'Citus: failure on connection marked as essential',
    pgError('XX000', 'ERROR', 'failure on connection marked as essential: 127.0.0.1:29401'),
    { retryable: true, mayHaveCommitted: true, relayed: true },
  ],
  [
    'Citus: connection to the remote node failed',
    pgError(
      'XX000',
      'ERROR',
      'connection to the remote node postgres@127.0.0.1:29402 failed with the following error: server closed the connection unexpectedly',
    ),
    { retryable: true, mayHaveCommitted: true, relayed: true },
  ],
  [
    'an internal error about something else',
    pgError('XX000', 'ERROR', 'cache lookup failed for relation 16384'),
    { retryable: false, mayHaveCommitted: false, relayed: false },
  ],
  [
    'a statement refused for good (unique violation)',
    pgError('23505', 'ERROR', 'duplicate key value violates unique constraint'),
    { retryable: false, mayHaveCommitted: false, relayed: false },
  ],
  [
    'a deadlock (rolled back, may win next time)',
    pgError('40P01', 'ERROR', 'deadlock detected'),
    { retryable: true, mayHaveCommitted: false, relayed: false },
  ],
  [
    'a connection that broke under the statement (no SQLSTATE)',
    Object.assign(new Error('Connection terminated unexpectedly'), {}),
    { retryable: true, mayHaveCommitted: true, relayed: false },
  ],
  [
    'a connection never made',
    Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
    { retryable: true, mayHaveCommitted: false, relayed: false },
  ],
];

test.each(cases)('%s', (_name, error, expected) => {
  expect({
    retryable: isRetryableWriteError(error),
    mayHaveCommitted: mayHaveCommitted(error),
    relayed: isRelayedConnectionFailure(error),
  }).toEqual(expected);
});

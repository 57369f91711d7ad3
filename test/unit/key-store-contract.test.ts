// The KeyStore contract (support/key-store-contract.ts) for the in-memory store the unit tests use,
// alone and under the caching decorator, both on a clock the test moves on.
import {
  coalescingSubject,
  describeKeyStoreContract,
  memorySubject,
} from '../support/key-store-contract';

describeKeyStoreContract('the in-memory store', async () => memorySubject());

describeKeyStoreContract('the caching decorator over the in-memory store', async () => {
  const inner = memorySubject();
  return coalescingSubject(inner, inner.now);
});

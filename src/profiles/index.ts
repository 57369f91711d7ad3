// The protocol profiles a route can speak (`idempotency.profile`).
import { ACP } from './acp';
import type { Profile, ProfileName } from './profile';
import { UCP } from './ucp';

export const PROFILES: Readonly<Record<ProfileName, Profile>> = { acp: ACP, ucp: UCP };
export type { Profile, ProfileName, ProfileRule } from './profile';

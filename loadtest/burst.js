// k6 burst scenario: one API key, a burst well above the bucket's capacity.
// Expected: exactly `capacity` responses 200, every other one a 429 with
// Retry-After >= 1, the problem+json body and X-RateLimit-Remaining: 0.
//
// Run it against the load-test gateway (limit "burst": capacity 20, refill 0.05/s):
//   scripts/run loadtest/conf/loadtest.yaml          # terminal 1: sluice on 127.0.0.1:8080
//   k6 run loadtest/burst.js                         # terminal 2
// Other gateway or limits: k6 run -e BASE_URL=http://127.0.0.1:8080 -e CAPACITY=20 -e RATE=0.05 \
//   -e REQUESTS=100 loadtest/burst.js
// Each run uses a fresh API key, so it starts from a full bucket. The hey twin of
// this scenario, runnable without k6: loadtest/burst.sh.
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const CAPACITY = Number(__ENV.CAPACITY || 20);
const RATE = Number(__ENV.RATE || 0.05);
const REQUESTS = Number(__ENV.REQUESTS || 100);
const MAX_SECONDS = 10;
// Tokens that can refill while the burst lasts (0 with the defaults).
const REFILLED = Math.floor(RATE * MAX_SECONDS);

const allowed = new Counter('allowed');
const denied = new Counter('denied');
const unexpected = new Counter('unexpected_status');

http.setResponseCallback(http.expectedStatuses(200, 429));

export const options = {
  scenarios: {
    burst: {
      executor: 'shared-iterations',
      vus: 10,
      iterations: REQUESTS,
      maxDuration: `${MAX_SECONDS}s`,
    },
  },
  thresholds: {
    // Exactly the capacity is allowed (plus what refills during the burst).
    allowed: REFILLED === 0
      ? [`count==${Math.min(CAPACITY, REQUESTS)}`]
      : [`count>=${Math.min(CAPACITY, REQUESTS)}`, `count<=${CAPACITY + REFILLED}`],
    denied: [`count>=${Math.max(0, REQUESTS - CAPACITY - REFILLED)}`],
    unexpected_status: ['count==0'],
    http_req_failed: ['rate==0'],
    checks: ['rate==1'],
  },
};

export function setup() {
  // count==0 thresholds need the metric to have a sample.
  unexpected.add(0);
  return { key: `k6-burst-${Date.now()}-${Math.floor(Math.random() * 1e9)}` };
}

export default function (data) {
  const res = http.get(`${BASE_URL}/burst`, { headers: { 'X-API-Key': data.key } });
  if (res.status === 200) {
    allowed.add(1);
    check(res, {
      'allowed: X-RateLimit-Limit is the capacity':
        (r) => Number(r.headers['X-Ratelimit-Limit']) === CAPACITY,
    });
  } else if (res.status === 429) {
    denied.add(1);
    check(res, {
      'denied: Retry-After >= 1': (r) => Number(r.headers['Retry-After']) >= 1,
      'denied: X-RateLimit-Remaining is 0': (r) => r.headers['X-Ratelimit-Remaining'] === '0',
      'denied: problem+json body': (r) =>
        (r.headers['Content-Type'] || '').startsWith('application/problem+json') &&
        r.json('status') === 429,
    });
  } else {
    unexpected.add(1);
  }
}

// A function's last answer, kept for the next call with the same input. The inputs the proxy reads
// on every request repeat: a deployment's one Host, a client's target on each retry, the second and
// the millisecond a burst of log lines is written in. Finding the answer again is one comparison.

/**
 * `compute` with its last input and answer kept: a call with the same input (`===`) returns the
 * same answer without computing it. Only for pure functions whose answer may be shared.
 */
export function rememberLast<In, Out>(compute: (input: In) => Out): (input: In) => Out {
  let held = false;
  let lastInput: In | undefined;
  let lastAnswer: Out | undefined;
  return (input) => {
    if (held && input === lastInput) return lastAnswer as Out;
    const answer = compute(input);
    lastInput = input;
    lastAnswer = answer;
    held = true;
    return answer;
  };
}

#!/usr/bin/env bash
# The steps of llmload's GitHub Action (action.yml at the repository's root), one subcommand
# each, so that a test can run them without GitHub (tests/ci_gates.rs):
#
#   cache-key       the key of the cached build: runner OS, llmload's version and Cargo.lock
#   install         cargo install from the action's own checkout, unless the cache restored it
#   fetch-baseline  the default branch's last report of this workflow, downloaded as a baseline
#   run             llmload run with the report, JUnit, baseline, job summary and comment body
#   comment         one sticky comment on the pull request, updated on every push
#
# Every value comes from the environment (the action's inputs, as LLMLOAD_*), never from text
# pasted into the script: a pull request's title or branch name cannot inject a command.
set -euo pipefail

action_dir=$(cd "$(dirname "$0")/../.." && pwd)
install_root=${LLMLOAD_INSTALL_ROOT:-$HOME/.llmload}

# Appends NAME=VALUE to the step's outputs (a file when run by GitHub; stdout otherwise).
output() {
  if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "$1=$2" >>"$GITHUB_OUTPUT"; else echo "$1=$2"; fi
}

cache_key() {
  local version lock
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$action_dir/Cargo.toml" | head -1)
  lock=$(sha256sum "$action_dir/Cargo.lock" | cut -c1-16)
  output key "llmload-${RUNNER_OS:-$(uname -s)}-${RUNNER_ARCH:-$(uname -m)}-$version-$lock"
}

install() {
  if [ "${LLMLOAD_CACHED:-}" = "true" ] && [ -x "$install_root/bin/llmload" ]; then
    echo "llmload restored from the cache: $("$install_root/bin/llmload" --version)"
  else
    local started=$SECONDS
    cargo install --locked --path "$action_dir" --root "$install_root"
    echo "llmload built in $((SECONDS - started)) s (cached for the next runs)"
  fi
  if [ -n "${GITHUB_PATH:-}" ]; then echo "$install_root/bin" >>"$GITHUB_PATH"; fi
}

# The run directory of this workflow's last run on the default branch that kept one: the runs
# are tried newest first, as a run whose install failed kept nothing.
fetch_baseline() {
  local workflow dir=${LLMLOAD_BASELINE_DIR:-llmload-baseline}
  workflow=$(basename "${GITHUB_WORKFLOW_REF%%@*}")
  local runs
  if ! runs=$(gh run list --repo "$GITHUB_REPOSITORY" --workflow "$workflow" \
    --branch "$LLMLOAD_DEFAULT_BRANCH" --event push --limit 10 \
    --json databaseId --jq '.[].databaseId'); then
    echo "::warning title=llmload::cannot list this workflow's runs on $LLMLOAD_DEFAULT_BRANCH: no baseline"
    return 0
  fi
  for id in $runs; do
    rm -rf "$dir"
    if gh run download "$id" --repo "$GITHUB_REPOSITORY" -n "$LLMLOAD_ARTIFACT" -D "$dir" 2>/dev/null \
      && [ -f "$dir/plan.kdl" ]; then
      echo "baseline: run $id of $LLMLOAD_DEFAULT_BRANCH"
      output dir "$dir"
      return 0
    fi
  done
  echo "::notice title=llmload::no report of $LLMLOAD_DEFAULT_BRANCH yet: this run is not compared (its own verdict still gates)"
}

run() {
  local out=${LLMLOAD_OUT:-llmload-report}
  local -a command=(run)
  if [ -n "${LLMLOAD_PLAN:-}" ]; then command+=("$LLMLOAD_PLAN"); fi
  command+=(--out "$out" --junit "$out/junit.xml")
  if [ -n "${LLMLOAD_TARGET:-}" ]; then command+=(--target "$LLMLOAD_TARGET"); fi
  case "${LLMLOAD_BASELINE:-auto}" in
    auto) if [ -n "${LLMLOAD_FETCHED_BASELINE:-}" ]; then command+=(--baseline "$LLMLOAD_FETCHED_BASELINE"); fi ;;
    none) ;;
    *) command+=(--baseline "$LLMLOAD_BASELINE") ;;
  esac
  if [ "${LLMLOAD_ALLOW_SERVER_INPUT:-false}" = "true" ]; then command+=(--allow-server); fi
  # The workflow's own `args:`, split as the shell splits them ('ttft p99 < 500ms' stays one).
  if [ -n "${LLMLOAD_ARGS:-}" ]; then
    local -a extra
    eval "extra=($LLMLOAD_ARGS)"
    command+=("${extra[@]}")
  fi
  # What llmload writes to the job summary is also the pull request's comment: one verdict.
  local summary real_summary=${GITHUB_STEP_SUMMARY:-}
  summary=$(mktemp)
  local code=0
  GITHUB_STEP_SUMMARY=$summary llmload "${command[@]}" || code=$?
  if [ -n "$real_summary" ]; then cat "$summary" >>"$real_summary"; fi
  mkdir -p "$out"
  {
    echo "<!-- llmload: ${LLMLOAD_ARTIFACT:-llmload-report} -->"
    cat "$summary"
    echo
    if [ -n "${GITHUB_RUN_ID:-}" ]; then
      echo "<sub>Report: artifact \`${LLMLOAD_ARTIFACT:-llmload-report}\` of [this run](${GITHUB_SERVER_URL:-https://github.com}/${GITHUB_REPOSITORY:-}/actions/runs/$GITHUB_RUN_ID). Exit code $code.</sub>"
    else
      echo "<sub>Report: $out. Exit code $code.</sub>"
    fi
  } >"$out/pr-comment.md"
  rm -f "$summary"
  output exit-code "$code"
  output comment-file "$out/pr-comment.md"
  output report "$out"
}

# One comment per pull request and artifact, found by its hidden marker and edited in place.
# A token that may not comment (a fork's pull request) is a warning: the job's verdict stands.
comment() {
  local file=$LLMLOAD_COMMENT_FILE marker
  marker=$(head -1 "$file")
  local api="repos/$GITHUB_REPOSITORY/issues"
  local id
  id=$(gh api "$api/$LLMLOAD_PR/comments" --paginate \
    --jq ".[] | select(.body | startswith(\"$marker\")) | .id" 2>/dev/null | head -1) || id=""
  if [ -n "$id" ]; then
    gh api -X PATCH "$api/comments/$id" -F "body=@$file" >/dev/null \
      || echo "::warning title=llmload::cannot update the pull request's comment (token permissions?)"
  else
    gh api -X POST "$api/$LLMLOAD_PR/comments" -F "body=@$file" >/dev/null \
      || echo "::warning title=llmload::cannot comment on the pull request (a fork's token is read-only; the job summary has the verdict)"
  fi
}

case "${1:-}" in
  cache-key) cache_key ;;
  install) install ;;
  fetch-baseline) fetch_baseline ;;
  run) run ;;
  comment) comment ;;
  *)
    echo "usage: $0 cache-key|install|fetch-baseline|run|comment" >&2
    exit 2
    ;;
esac

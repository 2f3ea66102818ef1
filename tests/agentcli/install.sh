#!/usr/bin/env bash
# Installs the pinned agent CLIs that the agentcli tier (tests/agentcli) drives against a model API
# served on loopback. Each CLI goes to its own npm prefix:
#
#     $RES_AGENTCLI_DIR/<name>/node_modules/.bin/<bin>        (RES_AGENTCLI_DIR default /tmp/res-agentcli)
#
# Only the npm registry is contacted (npm's own client). A CLI already installed at its pinned version
# is left alone, so running this twice costs a few milliseconds. One line per CLI at the end of this
# file: `install_cli NAME PACKAGE VERSION`.
#
#     bash tests/agentcli/install.sh            # all of them
#     bash tests/agentcli/install.sh claude     # only the named ones
set -euo pipefail

RES_AGENTCLI_DIR=${RES_AGENTCLI_DIR:-/tmp/res-agentcli}
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false
export npm_config_loglevel=${npm_config_loglevel:-error}
only=("$@")

install_cli() {  # NAME PACKAGE VERSION
  local name=$1 package=$2 version=$3 prefix
  if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then
    return 0
  fi
  prefix="$RES_AGENTCLI_DIR/$name"
  local have
  have=$(node -p "require('$prefix/node_modules/$package/package.json').version" 2>/dev/null || true)
  if [ "$have" = "$version" ]; then
    echo "agentcli: $name: $package@$version already in $prefix"
    return 0
  fi
  mkdir -p "$prefix"
  local t0=$SECONDS
  echo "agentcli: $name: npm install --prefix $prefix $package@$version"
  npm install --prefix "$prefix" "$package@$version"
  echo "agentcli: $name: installed in $((SECONDS - t0)) s"
}

install_cli claude @anthropic-ai/claude-code 2.1.328
install_cli gemini @google/gemini-cli 0.61.0
install_cli gemini-0.47 @google/gemini-cli 0.47.0
install_cli codex @openai/codex 0.171.0
install_cli opencode opencode-ai 1.18.33
install_cli copilot @github/copilot 1.0.102

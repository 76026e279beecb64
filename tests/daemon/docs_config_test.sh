#!/bin/sh
# docs/configuration.md against fzd itself: every setting fzd knows has a
# row in the settings table with its default and reloadability, and the
# annotated example passes `fzd --check-config`.
set -eu
fzd=${1:?usage: docs_config_test.sh FZD DOC}
doc=${2:?usage: docs_config_test.sh FZD DOC}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
"$fzd" --help | awk '/^Settings/ {on = 1; next}
  on && /^  [a-z_]+ / {print $1, $0}' > "$work/settings"
[ -s "$work/settings" ] || { echo "no settings in fzd --help" >&2; exit 1; }
while read -r key line; do
  row=$(grep -F "| \`$key\` |" "$doc" || true)
  if [ -z "$row" ]; then
    echo "docs: no row for setting $key" >&2; fail=1; continue
  fi
  def=$(printf '%s\n' "$line" | sed -n 's/.*default \([^,]*\).*/\1/p')
  printf '%s\n' "$row" | grep -qF "\`$def\`" ||
    { echo "docs: $key: default $def not in: $row" >&2; fail=1; }
  case "$line" in
  *reloadable*) want=yes ;;
  *) want=no ;;
  esac
  printf '%s\n' "$row" | grep -q "| $want |" ||
    { echo "docs: $key: reloadable should be $want in: $row" >&2; fail=1; }
done < "$work/settings"
# The example: the first JSON block of the document.
awk '/^```json$/ {on = 1; next} on && /^```$/ {exit} on {print}' "$doc" > "$work/example.json"
[ -s "$work/example.json" ] || { echo "docs: no JSON example" >&2; exit 1; }
"$fzd" --check-config "$work/example.json" || fail=1
n=$(wc -l < "$work/settings")
[ "$fail" -eq 0 ] && echo "docs/configuration.md: $n settings documented, example valid"
exit "$fail"

#!/bin/sh
# The man pages fzd(8) and fzctl(1) (item 23 of issue 10), as cmake
# --install installs them: groff renders each without a warning (-ww), the
# page names the build's version, and every option that fzd --help and
# fzctl's help list is described.  Exit status 77 (skipped) where groff is
# missing; tests/deps.sh installs it (Debian package groff-base) on CI.
#   man_test.sh MAN_DIR VERSION FZD FZCTL      (MAN_DIR holds man1/ and man8/)
set -eu
man=$1
version=$2
fzd=$3
fzctl=$4
if ! command -v groff > /dev/null 2>&1; then
  echo "SKIPPED: groff not found (Debian package groff-base)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fzd-man-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0

# Plain text, wide lines and no hyphenation, so options read as written.
render() { groff -man -Tascii -P-cbou -rLL=300n -rHY=0 "$1" 2> /dev/null; }
options_of() { grep -oE '(^|[ ,])--?[A-Za-z][A-Za-z-]*' | sed 's/^[ ,]*//' | sort -u; }

check_page() {
  page=$1
  help=$2
  if [ ! -f "$page" ]; then
    echo "FAIL: $page is missing"
    fail=1
    return
  fi
  if ! LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$page" > "$tmp/warn" 2>&1 ||
    [ -s "$tmp/warn" ]; then
    echo "FAIL: groff warns about $page:"
    cat "$tmp/warn"
    fail=1
  fi
  render "$page" > "$tmp/text"
  if ! grep -q "fzd $version" "$tmp/text"; then
    echo "FAIL: $page does not name version $version"
    fail=1
  fi
  for o in $(printf '%s\n' "$help" | options_of); do
    if ! grep -q -- "$o\\([^A-Za-z-]\\|\$\\)" "$tmp/text"; then
      echo "FAIL: $(basename "$page") does not describe $o"
      fail=1
    fi
  done
}

check_page "$man/man8/fzd.8" "$("$fzd" --help | sed -n '/^Options:/,/^$/p')"
ctl_help=$("$fzctl" --help | sed -n '/^Options:/,$p')
for cmd in $("$fzctl" --help | sed -n '/^Commands:/,/^$/p' | awk 'NF && !/:$/ { print $1 }'); do
  ctl_help="$ctl_help
$("$fzctl" help "$cmd" | tail -n +3)"
done
check_page "$man/man1/fzctl.1" "$ctl_help"
# Each command has its own entry (a tag line of COMMANDS).
for cmd in $("$fzctl" --help | sed -n '/^Commands:/,/^$/p' | awk 'NF && !/:$/ { print $1 }'); do
  if ! grep -Eq "^ +$cmd( |\$)" "$tmp/text"; then
    echo "FAIL: fzctl.1 does not describe the command $cmd"
    fail=1
  fi
done

[ "$fail" -eq 0 ] && echo "man pages render without warnings and describe every option: ok"
exit "$fail"

#!/bin/bash
# fzctl's bash completion (item 23 of issue 10): the file is valid bash, it
# registers a completion function for fzctl, and driving that function the
# way readline does (COMP_WORDS, COMP_CWORD) completes commands, options and
# their values.  Every option that fzctl's own help lists, globally and per
# command, must be offered, so the completion keeps up with the program.
#   completion_test.sh COMPLETION_FILE FZCTL
set -eu
file=$1
fzctl=$2
fail=0

bash -n "$file" || { echo "FAIL: $file is not valid bash"; exit 1; }
# shellcheck source=/dev/null
. "$file"
spec=$(complete -p fzctl 2> /dev/null) || { echo "FAIL: $file registers no completion for fzctl"; exit 1; }
func=$(echo "$spec" | sed -n 's/.* -F \([^ ]*\) .*/\1/p')
[ -n "$func" ] || { echo "FAIL: no completion function in '$spec'"; exit 1; }

# complete LINE: the candidates for the last word of LINE (a trailing space
# starts a new, empty word), sorted, one line.  Like readline, '=' is a word
# of its own (it is in COMP_WORDBREAKS).
complete_line() {
  local line=$1
  read -r -a COMP_WORDS <<< "${line//=/ = }"
  [[ $line == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE=$line
  COMP_POINT=${#line}
  COMPREPLY=()
  "$func" fzctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}

expect() {
  local got
  got=$(complete_line "$1")
  if [[ $got != "$2" ]]; then
    echo "FAIL: '$1' completes to '$got', expected '$2'"
    fail=1
  fi
}

expect "fzctl sub" "submit"
expect "fzctl st" "stats status"
expect "fzctl -S /run/fzd/gpu0.sock pr" "presets"
expect "fzctl --token t p" "ping presets"
expect "fzctl help s" "stats status submit"
expect "fzctl --ver" "--version"
expect "fzctl submit --dt" "--dtype"
expect "fzctl submit -t f" "f32 f64"
expect "fzctl submit --dtype i" "i16 i32 i64 i8"
expect "fzctl submit -p " "balanced fast lossless"
expect "fzctl submit -e 1e-3 --mode " "abs pwrel rel"
expect "fzctl submit --mode=p" "pwrel"
expect "fzctl submit -d --ve" "--verify"
expect "fzctl ping --c" "--count"
expect "fzctl status --j" "--json"
expect "fzctl -S " "tcp: unix:"

# Every option in fzctl's help is offered after '-'.
options_of() { grep -oE '(^|[ ,])--?[A-Za-z][A-Za-z-]*' | sed 's/^[ ,]*//' | sort -u; }
check_options() {
  local what=$1 line=$2 help=$3 offered o
  offered=" $(complete_line "$line") "
  for o in $(echo "$help" | options_of); do
    if [[ $offered != *" $o "* ]]; then
      echo "FAIL: '$line' does not offer $o, which '$what' lists"
      fail=1
    fi
  done
}
check_options "fzctl --help" "fzctl -" "$("$fzctl" --help | sed -n '/^Options:/,$p')"
for cmd in $("$fzctl" --help | sed -n '/^Commands:/,/^$/p' | awk 'NF && !/:$/ { print $1 }'); do
  [[ $cmd == help ]] && continue
  check_options "fzctl help $cmd" "fzctl $cmd -" "$("$fzctl" help "$cmd" | tail -n +3)"
  # ... and every command is completed.
  case " $(complete_line "fzctl ") " in
  *" $cmd "*) ;;
  *) echo "FAIL: 'fzctl ' does not offer the command $cmd"; fail=1 ;;
  esac
done

[[ $fail -eq 0 ]] && echo "fzctl bash completion: ok"
exit "$fail"

import { quote } from '../core/shell.ts';
import type { Command } from './commands.ts';

/**
 * The completion scripts for etcd-kvm (bash, zsh, fish), from the command table: the commands at first, then the
 * command's flags for a word starting with "-"; after --tags and --skip-tags the step names (the part after
 * the last comma of a list), after --limit, --replace, --adopt and --member, and as logs' and ssh's first
 * word, the members of the inventory named by -i (its `- name:` lines under `members:`, read without running
 * the tool: a TAB costs no Node start). Anything else (an inventory, a directory) is left to the shell's own
 * filename completion, which is what those values are.
 */

export const COMPLETION_SHELLS = ['bash', 'zsh', 'fish'] as const;
export type CompletionShell = (typeof COMPLETION_SHELLS)[number];

/** What every script completes, read from the command table. */
export interface CompletionInput {
  commands: readonly Command[];
  /** The completion command's own name. */
  completion: string;
  /** The selectable step names, for --tags and --skip-tags. */
  steps: readonly string[];
}

/** sed's program printing the inventory's member names (`  - name: x` under `members:`). */
const MEMBER_NAMES_SED = `/^members:/,/^[^ #-]/s/^  - name: *["']?([A-Za-z0-9._-]+).*/\\1/p`;
/** Flags whose value is a member's name. */
const MEMBER_FLAGS = ['-l', '--limit', '--replace', '--adopt', '--member'];
const TAG_FLAGS = ['-t', '--tags', '--skip-tags'];
/** logs' and ssh's options that take a value: the word after them is not the member. */
const VALUE_OPTIONS = ['-i', '--inventory', '-n', '--lines', '--since'];

export function completionScript(shell: CompletionShell, input: CompletionInput): string {
  if (shell === 'zsh') return zshCompletion(input);
  if (shell === 'fish') return fishCompletion(input);
  return bashCompletion(input);
}

/** The words a first position completes: the commands, then completion, help and version. */
const firstWords = ({ commands, completion }: CompletionInput) => [
  ...commands.map((command) => command.name),
  completion,
  'help',
  'version',
];

function bashCompletion(input: CompletionInput): string {
  const { commands, completion, steps } = input;
  const names = commands.map((command) => command.name).join(' ');
  const words = `${firstWords(input).join(' ')} --help --version`;
  const cases = commands.map((command) => `    ${command.name}) flags='${command.flags.join(' ')}' ;;`);
  return `# bash completion for etcd-kvm. Load it with:  source <(etcd-kvm completion bash)
# or save it as ~/.local/share/bash-completion/completions/etcd-kvm.
_etcd_kvm_members() {
  local i inventory
  for ((i = 1; i < COMP_CWORD; i++)); do
    case \${COMP_WORDS[i]} in -i | --inventory) inventory=\${COMP_WORDS[i + 1]} ;; --inventory=*) inventory=\${COMP_WORDS[i]#*=} ;; esac
  done
  [[ -r $inventory ]] && sed -nE ${quote(MEMBER_NAMES_SED)} "$inventory"
}
_etcd_kvm() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD - 1]} flags
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W '${words}' -- "$cur"))
    return
  fi
  case $prev in
    ${TAG_FLAGS.join(' | ')})
      local done=\${cur%,*}; [[ $done == "$cur" ]] && done='' || done="$done,"
      COMPREPLY=($(compgen -P "$done" -W '${steps.join(' ')}' -- "\${cur##*,}")); return ;;
    ${MEMBER_FLAGS.join(' | ')}) COMPREPLY=($(compgen -W "$(_etcd_kvm_members)" -- "$cur")); return ;;
  esac
  case \${COMP_WORDS[1]} in
    logs | ssh)
      local words=0 i
      for ((i = 2; i < COMP_CWORD; i++)); do
        case \${COMP_WORDS[i]} in ${VALUE_OPTIONS.join(' | ')}) ((i++)) ;; -*) ;; *) ((words++)) ;; esac
      done
      if [[ $cur != -* && $words -eq 0 ]]; then COMPREPLY=($(compgen -W "$(_etcd_kvm_members)" -- "$cur")); return; fi ;;
  esac
  case \${COMP_WORDS[1]} in
${cases.join('\n')}
    ${completion}) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W '${COMPLETION_SHELLS.join(' ')}' -- "$cur")); return ;;
    help) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W '${names}' -- "$cur")); return ;;
    *) return ;;
  esac
  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$flags" -- "$cur")); fi
}
complete -o default -F _etcd_kvm etcd-kvm`;
}

/**
 * zsh's: one function, `compadd` with the candidates (zsh matches them against the word), `compset -P '*,'` for a
 * list of steps, `_files` for anything else. Sourced (`source <(etcd-kvm completion zsh)`, after compinit) it
 * registers itself with compdef; saved as `_etcd-kvm` in a directory of $fpath, zsh autoloads it.
 */
function zshCompletion(input: CompletionInput): string {
  const { commands, completion, steps } = input;
  const cases = commands.map((command) => `    ${command.name}) flags=(${command.flags.join(' ')}) ;;`);
  return `#compdef etcd-kvm
# zsh completion for etcd-kvm. Load it with:  source <(etcd-kvm completion zsh)   (after compinit)
# or save it as _etcd-kvm in a directory of your $fpath.
_etcd_kvm_members() {
  local i inventory
  for ((i = 2; i < CURRENT; i++)); do
    case \${words[i]} in -i | --inventory) inventory=\${words[i + 1]} ;; --inventory=*) inventory=\${words[i]#*=} ;; esac
  done
  [[ -r $inventory ]] && sed -nE ${quote(MEMBER_NAMES_SED)} "$inventory"
}
_etcd_kvm() {
  local cur=\${words[CURRENT]} prev=\${words[CURRENT - 1]}
  local -a flags
  if ((CURRENT == 2)); then
    compadd -- ${firstWords(input).join(' ')}
    return
  fi
  case $prev in
    ${TAG_FLAGS.join(' | ')}) compset -P '*,'; compadd -- ${steps.join(' ')}; return ;;
    ${MEMBER_FLAGS.join(' | ')}) compadd -- \${(f)"$(_etcd_kvm_members)"}; return ;;
  esac
  case \${words[2]} in
    logs | ssh)
      local n=0 i
      for ((i = 3; i < CURRENT; i++)); do
        case \${words[i]} in ${VALUE_OPTIONS.join(' | ')}) ((i++)) ;; -*) ;; *) ((n++)) ;; esac
      done
      if [[ $cur != -* ]] && ((n == 0)); then compadd -- \${(f)"$(_etcd_kvm_members)"}; return; fi ;;
  esac
  case \${words[2]} in
${cases.join('\n')}
    ${completion}) ((CURRENT == 3)) && compadd -- ${COMPLETION_SHELLS.join(' ')}; return ;;
    help) ((CURRENT == 3)) && compadd -- ${commands.map((command) => command.name).join(' ')}; return ;;
    *) return ;;
  esac
  if [[ $cur == -* ]]; then compadd -- $flags; else _files; fi
}
if [[ \${funcstack[1]} == _etcd-kvm ]]; then _etcd_kvm "$@"; else compdef _etcd_kvm etcd-kvm; fi`;
}

/** A word in fish's single quotes, where only \\ and \' are escapes. */
const fishQuote = (word: string) => `'${word.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/**
 * fish's: \`complete\` rules, each with the condition under which it applies; the helpers read the command line
 * (\`commandline -opc\`). Files stay fish's default wherever no rule says -f.
 */
function fishCompletion(input: CompletionInput): string {
  const { commands, completion, steps } = input;
  const subcommand = (names: readonly string[]) => `'__fish_seen_subcommand_from ${names.join(' ')}'`;
  const firsts = [
    ...commands.map((command) => [command.name, command.summary]),
    [completion, 'print a completion script for bash, zsh or fish'],
    ['help', "a command's usage"],
    ['version', "etcd-kvm's version"],
  ];
  const flagLines = commands.flatMap((command) =>
    command.flags.map((flag) => `complete -c etcd-kvm -n ${subcommand([command.name])} -l ${flag.slice(2)}`),
  );
  const notAValue = `not __etcd_kvm_after ${VALUE_OPTIONS.join(' ')}`;
  const memberWordWanted = `__fish_seen_subcommand_from logs ssh; and __etcd_kvm_no_word_yet; and ${notAValue}`;
  return `# fish completion for etcd-kvm. Load it with:  etcd-kvm completion fish | source
# or save it as ~/.config/fish/completions/etcd-kvm.fish
function __etcd_kvm_members
    set -l tokens (commandline -opc)
    set -l inventory
    for i in (seq (count $tokens))
        switch $tokens[$i]
            case -i --inventory
                test $i -lt (count $tokens); and set inventory $tokens[(math $i + 1)]
            case '--inventory=*'
                set inventory (string replace -- --inventory= '' $tokens[$i])
        end
    end
    test -n "$inventory" -a -r "$inventory"; and sed -nE ${fishQuote(MEMBER_NAMES_SED)} $inventory
end
function __etcd_kvm_after
    set -l tokens (commandline -opc)
    contains -- $tokens[-1] $argv
end
function __etcd_kvm_steps
    set -l listed (string match -r '^.*,' -- (commandline -ct))
    # No comma yet: one empty word, for fish joins a word to an empty list as nothing at all.
    test -n "$listed"; or set listed ''
    for step in ${steps.join(' ')}
        echo $listed$step
    end
end
function __etcd_kvm_no_word_yet
    set -l tokens (commandline -opc)
    set -l skip 0
    for token in $tokens[3..-1]
        if test $skip = 1
            set skip 0
        else if contains -- $token ${VALUE_OPTIONS.join(' ')}
            set skip 1
        else if not string match -q -- '-*' $token
            return 1
        end
    end
end
${firsts.map(([name, summary]) => `complete -c etcd-kvm -n __fish_use_subcommand -f -a ${name} -d ${fishQuote(summary!)}`).join('\n')}
${flagLines.join('\n')}
complete -c etcd-kvm -n ${subcommand([completion])} -f -a ${fishQuote(COMPLETION_SHELLS.join(' '))}
complete -c etcd-kvm -n ${subcommand(['help'])} -f -a ${fishQuote(commands.map((command) => command.name).join(' '))}
complete -c etcd-kvm -n ${fishQuote(`__etcd_kvm_after ${TAG_FLAGS.join(' ')}`)} -f -a '(__etcd_kvm_steps)'
complete -c etcd-kvm -n ${fishQuote(`__etcd_kvm_after ${MEMBER_FLAGS.join(' ')}`)} -f -a '(__etcd_kvm_members)'
complete -c etcd-kvm -n '${memberWordWanted}' -f -a '(__etcd_kvm_members)'`;
}

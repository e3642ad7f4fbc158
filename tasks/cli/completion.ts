import type { Command } from './commands.ts';

/**
 * A bash completion script for etcd-kvm, from the command table: the commands at first, then the
 * command's flags for a word starting with "-"; after --tags and --skip-tags the step names (the part after
 * the last comma of a list), after --limit, --replace, --adopt and --member, and as logs' and ssh's first
 * word, the members of the inventory named by -i (its `- name:` lines under `members:`, read without running
 * the tool: a TAB costs no Node start). Anything else (an inventory, a directory) is left to bash's own
 * filename completion (`complete -o default`), which is what those values are.
 */
export function bashCompletion(commands: readonly Command[], completion: string, steps: readonly string[]): string {
  const names = commands.map((command) => command.name).join(' ');
  const words = `${names} ${completion} help version --help --version`;
  const cases = commands.map((command) => `    ${command.name}) flags='${command.flags.join(' ')}' ;;`);
  return `# bash completion for etcd-kvm. Load it with:  source <(etcd-kvm completion bash)
# or save it as ~/.local/share/bash-completion/completions/etcd-kvm.
# zsh: autoload -U +X bashcompinit && bashcompinit; source <(etcd-kvm completion bash)
_etcd_kvm_members() {
  local i inventory
  for ((i = 1; i < COMP_CWORD; i++)); do
    case \${COMP_WORDS[i]} in -i | --inventory) inventory=\${COMP_WORDS[i + 1]} ;; --inventory=*) inventory=\${COMP_WORDS[i]#*=} ;; esac
  done
  [[ -r $inventory ]] && sed -nE '/^members:/,/^[^ #-]/s/^  - name: *["'"'"']?([A-Za-z0-9._-]+).*/\\1/p' "$inventory"
}
_etcd_kvm() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD - 1]} flags
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W '${words}' -- "$cur"))
    return
  fi
  case $prev in
    -t | --tags | --skip-tags)
      local done=\${cur%,*}; [[ $done == "$cur" ]] && done='' || done="$done,"
      COMPREPLY=($(compgen -P "$done" -W '${steps.join(' ')}' -- "\${cur##*,}")); return ;;
    -l | --limit | --replace | --adopt | --member) COMPREPLY=($(compgen -W "$(_etcd_kvm_members)" -- "$cur")); return ;;
  esac
  case \${COMP_WORDS[1]} in
    logs | ssh)
      local words=0 i
      for ((i = 2; i < COMP_CWORD; i++)); do
        case \${COMP_WORDS[i]} in -i | --inventory | -n | --lines | --since) ((i++)) ;; -*) ;; *) ((words++)) ;; esac
      done
      if [[ $cur != -* && $words -eq 0 ]]; then COMPREPLY=($(compgen -W "$(_etcd_kvm_members)" -- "$cur")); return; fi ;;
  esac
  case \${COMP_WORDS[1]} in
${cases.join('\n')}
    ${completion}) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W 'bash' -- "$cur")); return ;;
    help) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W '${names}' -- "$cur")); return ;;
    *) return ;;
  esac
  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$flags" -- "$cur")); fi
}
complete -o default -F _etcd_kvm etcd-kvm`;
}

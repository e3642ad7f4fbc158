import type { Command } from './main.ts';

/**
 * A bash completion script for etcd-kvm, from the command table: the commands at first, then the
 * command's flags for a word starting with "-". Anything else (an inventory, a directory) is left to
 * bash's own filename completion (`complete -o default`), which is what those values are.
 */
export function bashCompletion(commands: readonly Command[], completion: string): string {
  const names = commands.map((command) => command.name).join(' ');
  const words = `${names} ${completion} help version --help --version`;
  const cases = commands.map((command) => `    ${command.name}) flags='${command.flags.join(' ')}' ;;`);
  return `# bash completion for etcd-kvm. Load it with:  source <(etcd-kvm completion bash)
# or save it as ~/.local/share/bash-completion/completions/etcd-kvm.
# zsh: autoload -U +X bashcompinit && bashcompinit; source <(etcd-kvm completion bash)
_etcd_kvm() {
  local cur=\${COMP_WORDS[COMP_CWORD]} flags
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W '${words}' -- "$cur"))
    return
  fi
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

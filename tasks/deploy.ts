// `npx tsx tasks/deploy.ts -i INVENTORY`, where the README has always put it: the deploy command
// (tasks/commands/deploy.ts), which runs itself when imported, as the installed `etcd-kvm deploy` does.
import './commands/deploy.ts';

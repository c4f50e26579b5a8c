/* The pod sandbox ("pause") process of hack/kube-node.sh's local image (no registry here):
 * sleeps until SIGINT/SIGTERM, reaps the zombies it inherits. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void sigdown(int s) { (void)s; _exit(0); }
static void sigreap(int s) { (void)s; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
  struct sigaction a = {0};
  a.sa_handler = sigdown;
  sigaction(SIGINT, &a, NULL);
  sigaction(SIGTERM, &a, NULL);
  a.sa_handler = sigreap;
  a.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &a, NULL);
  for (;;) pause();
}

/* The `zgate` command: self-check, benchmark and build information for libzgate. */
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: zgate <command> [options]\n"
          "\n"
          "zgate computes Mamba-3's SiLU output gate and its backward on CPUs and NVIDIA GPUs.\n"
          "\n"
          "commands:\n"
          "  info    version, CPU paths built / runnable / chosen, CUDA devices\n"
          "  check   precision suite on every backend and CPU path vs the float64 reference;\n"
          "          writes a Markdown report\n"
          "  bench   bandwidth suite: time, GB/s and %% of a ceiling measured in the same run,\n"
          "          each with its range over the timed calls; writes JSON and a PNG chart\n"
          "\n"
          "exit codes: 0 all ran and passed; 1 a check failed or zgate returned an error; 2 bad\n"
          "options or an output path that cannot be written (nothing run); 3 something asked\n"
          "for did not run (not enough memory, no device) and nothing failed.\n"
          "'zgate <command> --help' describes each command's options.\n");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach a log as they are printed */
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (!strcmp(cmd, "--version")) {
    printf("zgate %s\n", zgate_version());
    return CLI_EXIT_OK;
  }
  if (!strcmp(cmd, "info")) return cli_cmd_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "check")) return cli_cmd_check(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cli_cmd_bench(argc - 1, argv + 1);
  fprintf(stderr, "zgate: unknown command '%s' (commands: info, check, bench; see 'zgate --help')\n", cmd);
  return CLI_EXIT_USAGE;
}

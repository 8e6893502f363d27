/* Outputs of `zgate bench`: the table, a JSON file with every measurement, and a PNG chart
 * (achieved GB/s against the ceiling of the same run, per configuration, one panel per
 * backend) drawn by gnuplot from a data file and a script written next to the PNG. */
#define _POSIX_C_SOURCE 200809L /* access under -std=c11 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static const char ceiling_cpu[] = "fastest stream variant (ceiling_variants), same reads, writes, threads and bytes";
static const char ceiling_cuda[] = "device-to-device copy of the same bytes";

/* "" for a trustworthy row, else why not ("noisy", "above ceiling" or both). */
static const char *flag_of(const bench_result *r) {
  if (r->error[0]) return "";
  int noisy = r->time_s[2] > BENCH_NOISY_SPREAD * r->time_s[1] || r->ceiling_s[2] > BENCH_NOISY_SPREAD * r->ceiling_s[1];
  int above = r->pct[0] > BENCH_MAX_PLAUSIBLE_PCT;
  return noisy && above ? "noisy, above ceiling" : noisy ? "noisy" : above ? "above ceiling" : "";
}

/* The first columns of a row: backend, op, shape, dtype (one type, or "mixed": the JSON has
 * every tensor's), layout. */
static void row_head(const bench_result *r) {
  char shape[64], dts[64];
  cli_shape_str(r->shape, shape, sizeof shape);
  cli_dtypes_str(&r->dt, r->fwd, dts, sizeof dts);
  printf("%-10s %-3s %-22s %-8s %-8s", r->be->label, r->fwd ? "fwd" : "bwd", shape, strchr(dts, ' ') ? "mixed" : dts,
         cli_layout_names[r->layout]);
}

/* "v (lo..hi)" of a figure of three. */
static const char *range_cell(char *buf, size_t n, const double v[3], double scale) {
  snprintf(buf, n, "%.1f (%.1f..%.1f)", v[0] * scale, v[1] * scale, v[2] * scale);
  return buf;
}

void bench_print_table(const bench_result *r, int n, const bench_meta *m) {
  printf("%-10s %-3s %-22s %-8s %-8s %9s  %-30s %-20s %-20s %-21s %s\n", "backend", "op", "shape", "dtype", "layout",
         "MB moved", "median us (fastest..slowest)", "GB/s (range)", "ceil GB/s (range)", "% ceil (range)", "flag");
  int nflag = 0, nv = 0;
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    char c1[48], c2[48], c3[48], c4[48];
    row_head(x);
    if (x->error[0]) {
      printf(" %s\n", x->error);
      continue;
    }
    nflag += flag_of(x)[0] != 0;
    if (x->nvariants > nv) nv = x->nvariants;
    printf(" %9.1f  %-30s %-20s %-20s %-21s %s\n", x->bytes / 1e6, range_cell(c1, sizeof c1, x->time_s, 1e6),
           range_cell(c2, sizeof c2, x->gbps, 1.0), range_cell(c3, sizeof c3, x->ceiling_gbps, 1.0),
           range_cell(c4, sizeof c4, x->pct, 1.0), flag_of(x));
  }
  printf("(ranges: lowest..highest over the timed calls; %% ceil's pairs zgate's slowest call with the ceiling's fastest and back)\n");
  if (nflag)
    printf("%d of %d rows flagged: 'noisy' = the slowest timed call (zgate's or the ceiling's) took more than %.2fx "
           "the fastest; 'above ceiling' = over %.0f%% of the ceiling, which a memory-bound operator cannot reach. "
           "The machine was busy (load average at start: %.2f on %d CPUs): rerun on a quiet one.\n",
           nflag, n, BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT, m->have_load ? m->load[0] : -1.0, m->cpus);
  if (m->settle_asked && !m->settled)
    printf("The machine did not settle within %.0f s (load average %.2f on %d CPUs): the figures may be low.\n",
           m->settle_wait_s, m->load[0], m->cpus);
  if (!nv) return;
  /* The CPU ceiling's variants: a legend, then each CPU row's median GB/s of every variant. */
  printf("\nCPU ceiling: the fastest of %d stream variants on each row's buffers, timed round robin "
         "(median GB/s; * the ceiling, - not usable on these buffers):\n", nv);
  for (int v = 0; v < nv; v++) printf("  v%-2d %s\n", v + 1, zb_variant_get(v)->name);
  printf("%-10s %-3s %-22s %-8s %-8s", "backend", "op", "shape", "dtype", "layout");
  for (int v = 0; v < nv; v++) printf("  %5s%d ", "v", v + 1);
  printf("\n");
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    if (x->error[0] || !x->nvariants) continue;
    row_head(x);
    for (int v = 0; v < x->nvariants; v++) {
      if (x->variant_gbps[v][0] < 0) printf("  %6s ", "-");
      else printf("  %6.1f%s", x->variant_gbps[v][0], v == x->ceiling_variant ? "*" : " ");
    }
    printf("\n");
  }
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f), fputc(*s, f);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned char)*s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

/* A number, or null for what JSON cannot hold (inf, NaN). */
static void json_num(FILE *f, const char *before, double v) {
  fprintf(f, v == v && v < 1e300 && v > -1e300 ? "%s%.6g" : "%snull", before, v);
}

/* ", name: v[0], name_range: [v[1], v[2]]". */
static void json_num3(FILE *f, const char *name, const double v[3], double scale) {
  fprintf(f, ", \"%s\": ", name);
  json_num(f, "", v[0] * scale);
  fprintf(f, ", \"%s_range\": ", name);
  json_num(f, "[", v[1] * scale);
  json_num(f, ", ", v[2] * scale);
  fputc(']', f);
}

int bench_write_json(const char *path, const bench_result *r, int n, const bench_meta *m) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\n  \"tool\": \"zgate bench\",\n  \"zgate_version\": ");
  json_str(f, zgate_version());
  fprintf(f, ",\n  \"build\": ");
  json_str(f, zgate_build_info());
  fprintf(f, ",\n  \"date\": \"%s\",\n  \"cpu_threads\": %d,\n  \"load_average_at_start\": ", m->date, m->threads);
  if (m->have_load) fprintf(f, "[%.2f, %.2f, %.2f]", m->load[0], m->load[1], m->load[2]);
  else fputs("null", f);
  fprintf(f, ",\n  \"cpus_online\": %d,\n  \"settle\": ", m->cpus);
  if (m->settle_asked) fprintf(f, "{\"waited_s\": %.1f, \"settled\": %s}", m->settle_wait_s, m->settled ? "true" : "false");
  else fputs("null", f);
  fprintf(f, ",\n  \"ceiling\": {\"cpu\": \"%s\", \"cuda\": \"%s\"},\n", ceiling_cpu, ceiling_cuda);
  fprintf(f, "  \"bytes_counted\": \"bytes read plus bytes written by the operator, once each\",\n");
  fprintf(f, "  \"ranges\": \"[lowest, highest] over the timed calls; pct_of_ceiling's pairs zgate's slowest call "
             "with the ceiling's fastest and back\",\n");
  fprintf(f, "  \"flags\": \"noisy: the slowest timed call (zgate's or the ceiling's) took more than %.2fx the "
             "fastest; above ceiling: over %.0f%% of the ceiling\",\n", BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT);
  fprintf(f, "  \"results\": [");
  for (int i = 0; i < n; i++) {
    static const char *const fwd_names[] = {"o", "z", "out"};
    static const int fwd_t[] = {CLI_O, CLI_Z, CLI_DZ};
    const bench_result *x = &r[i];
    fprintf(f, "%s\n    {\"backend\": \"%s\", \"op\": \"%s\", \"shape\": [%lld, %lld, %lld, %lld], \"dtypes\": {",
            i ? "," : "", x->be->label, x->fwd ? "fwd" : "bwd", (long long)x->shape[0], (long long)x->shape[1],
            (long long)x->shape[2], (long long)x->shape[3]);
    for (int t = 0; t < (x->fwd ? 3 : CLI_NT); t++)
      fprintf(f, "%s\"%s\": \"%s\"", t ? ", " : "", x->fwd ? fwd_names[t] : cli_tensor_names[t],
              cli_dtype_name(x->dt.t[x->fwd ? fwd_t[t] : t]));
    fprintf(f, "}, \"layout\": \"%s\", \"elements\": %lld, \"bytes\": %.0f, \"repeats\": %d, \"threads\": %d",
            cli_layout_names[x->layout], (long long)cli_numel(x->shape), x->bytes, x->repeats, x->threads);
    if (x->error[0]) {
      fprintf(f, ", \"error\": ");
      json_str(f, x->error);
      fputc('}', f);
      continue;
    }
    json_num(f, ",\n     \"first_call_us\": ", x->first_s * 1e6);
    json_num3(f, "median_us", x->time_s, 1e6);
    json_num3(f, "gbps", x->gbps, 1.0);
    fputs("\n    ", f);
    json_num3(f, "ceiling_median_us", x->ceiling_s, 1e6);
    json_num3(f, "ceiling_gbps", x->ceiling_gbps, 1.0);
    json_num3(f, "pct_of_ceiling", x->pct, 1.0);
    if (x->ceiling_variant >= 0) {
      fprintf(f, ",\n     \"ceiling_variant\": \"%s\", \"ceiling_variants\": [", zb_variant_get(x->ceiling_variant)->name);
      for (int v = 0; v < x->nvariants; v++) {
        fprintf(f, "%s{\"name\": \"%s\"", v ? ", " : "", zb_variant_get(v)->name);
        if (x->variant_gbps[v][0] < 0) fprintf(f, ", \"usable\": false}");
        else json_num3(f, "gbps", x->variant_gbps[v], 1.0), fputc('}', f);
      }
      fputc(']', f);
    }
    fprintf(f, ", \"flag\": \"%s\"}", flag_of(x));
  }
  fprintf(f, "\n  ]\n}\n");
  int bad = ferror(f);
  return (fclose(f) || bad) ? -1 : 0;
}

int bench_check_png(const char *png_path) {
  /* The path goes between single quotes in a shell command and a gnuplot string. */
  if (strpbrk(png_path, "'\"\n\\")) {
    cli_error("bench", "--png %s: the path contains quotes or backslashes, which gnuplot cannot take; choose another",
              png_path);
    return -1;
  }
  return cli_check_output("bench", "--png", png_path);
}

/* Appends to a gnuplot title ("\n" between lines, as gnuplot writes it). */
static void title_line(char *title, size_t n, const char *fmt, ...) {
  size_t len = strlen(title);
  va_list ap;
  va_start(ap, fmt);
  if (len + 2 < n) vsnprintf(title + len + (len ? 2 : 0), n - len - (len ? 2 : 0), fmt, ap);
  if (len && len + 2 < n) memcpy(title + len, "\\n", 2);
  va_end(ap);
}

int bench_plot(const char *png_path, const bench_result *r, int n, const bench_meta *m) {
  size_t len = strlen(png_path);
  char *dat = malloc(len + 8), *gp = malloc(len + 8), *cmd = malloc(len + 32), title[2048] = "";
  int npanels = 0, rows = 0, maxrows = 0, nflag = 0, rc = -1;
  unsigned layouts = 0;
  FILE *f = NULL;
  if (!dat || !gp || !cmd) goto done;
  if (len > 4 && !strcmp(png_path + len - 4, ".png")) len -= 4;
  sprintf(dat, "%.*s.dat", (int)len, png_path);
  sprintf(gp, "%.*s.gp", (int)len, png_path);

  /* One data block per backend (gnuplot's "index"); the results come backend by backend. */
  if (!(f = fopen(dat, "w"))) {
    cli_error("bench", "cannot write '%s'", dat);
    goto done;
  }
  fprintf(f, "# zgate bench: label, GB/s (median, lowest, highest), ceiling GB/s (the same), bar label\n");
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    if (i == 0 || x->be != r[i - 1].be) fprintf(f, "%s# %s\n", npanels++ ? "\n\n" : "", x->be->label), rows = 0;
    if (x->error[0]) continue;
    char dts[64];
    const char *flag = flag_of(x);
    cli_dtypes_str(&x->dt, x->fwd, dts, sizeof dts);
    nflag += flag[0] != 0;
    layouts |= 1u << x->layout;
    if (++rows > maxrows) maxrows = rows;
    fprintf(f, "\"%s %s %s %lldx%lldx%lldx%lld\" %.4g %.4g %.4g %.4g %.4g %.4g \"%.0f%%%s%s\"\n", x->fwd ? "fwd" : "bwd",
            strchr(dts, ' ') ? "mixed" : dts, cli_layout_names[x->layout], (long long)x->shape[0],
            (long long)x->shape[1], (long long)x->shape[2], (long long)x->shape[3], x->gbps[0], x->gbps[1], x->gbps[2],
            x->ceiling_gbps[0], x->ceiling_gbps[1], x->ceiling_gbps[2], x->pct[0], flag[0] ? " ! " : "", flag);
  }
  fclose(f);

  /* The title says what the bars, whiskers and marks are, and what each layout name means. */
  title_line(title, sizeof title, "zgate %s: achieved bandwidth vs the ceiling measured in the same run (%s)",
             zgate_version(), m->date);
  title_line(title, sizeof title,
             "bars: median of the timed calls; whiskers: their lowest..highest; '!': the calls spread more than %.2fx "
             "(noisy) or the row is above %.0f%% of its ceiling",
             BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT);
  if (m->have_load)
    title_line(title, sizeof title, "load average at start: %.2f %.2f %.2f on %d CPUs%s", m->load[0], m->load[1],
               m->load[2], m->cpus, nflag ? ": the machine was busy, so the flagged rows are not to be trusted" : "");
  if (m->settle_asked)
    title_line(title, sizeof title, "%s after waiting %.0f s for the load to fall",
               m->settled ? "the machine settled" : "THE MACHINE DID NOT SETTLE (figures may be low)", m->settle_wait_s);
  int nlines = 2 + m->have_load + m->settle_asked;
  for (int i = 0; i < CLI_NLAYOUTS; i++)
    if (layouts >> i & 1u) title_line(title, sizeof title, "%s: %s", cli_layout_names[i], cli_layout_about[i]), nlines++;
  int width = 360 + 95 * (maxrows > 4 ? maxrows : 4);
  width = width < 900 ? 900 : width > 2400 ? 2400 : width; /* at least the title's room */
  if (!(f = fopen(gp, "w"))) {
    cli_error("bench", "cannot write '%s'", gp);
    goto done;
  }
  fprintf(f, "# gnuplot script written by 'zgate bench'; run: gnuplot '%s'\n", gp);
  fprintf(f, "set terminal pngcairo size %d,%d font 'DejaVu Sans,10' noenhanced\n", width, 140 + 16 * nlines + 420 * npanels);
  fprintf(f, "set output '%s'\n", png_path);
  fprintf(f, "set multiplot layout %d,1 title \"%s\"\n", npanels > 0 ? npanels : 1, title);
  fprintf(f, "set style fill solid 0.9 border rgb '#333333'\nset boxwidth 0.38\nset grid ytics lc rgb '#dddddd'\n");
  fprintf(f, "set ylabel 'GB/s (bytes read + written)'\nset yrange [0:*]\nset offsets 0.6, 0.6, 0, 0\n");
  fprintf(f, "set xtics rotate by 25 right nomirror font ',9'\nset key top left opaque box\nset bmargin 8\nset lmargin 16\n");
  for (int i = 0, k = 0; i < n; i++) {
    if (i > 0 && r[i].be == r[i - 1].be) continue;
    if (r[i].be->is_cuda) fprintf(f, "set title '%s (ceiling: %s)'\n", r[i].be->label, ceiling_cuda);
    else fprintf(f, "set title '%s, %d threads (ceiling: %s)'\n", r[i].be->label, m->threads, ceiling_cpu);
    fprintf(f,
            "plot '%s' index %d using ($0-0.2):2 with boxes lc rgb '#2b6cb0' title 'zgate', \\\n"
            "     '' index %d using ($0+0.2):5 with boxes lc rgb '#c8c8c8' title 'ceiling', \\\n"
            "     '' index %d using ($0-0.2):2:3:4 with yerrorbars lc rgb '#000000' ps 0 title 'lowest..highest', \\\n"
            "     '' index %d using ($0+0.2):5:6:7 with yerrorbars lc rgb '#000000' ps 0 notitle, \\\n"
            "     '' index %d using ($0-0.2):4:8 with labels offset 0,0.8 font ',9' notitle, \\\n"
            "     '' index %d using 0:(0):xtic(1) with points ps 0 notitle\n",
            dat, k, k, k, k, k, k);
    k++;
  }
  fprintf(f, "unset multiplot\n");
  fclose(f);

  if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
    fprintf(stderr, "zgate bench: gnuplot not found, so no chart was drawn; wrote %s and %s "
                    "(install gnuplot-nox, then run: gnuplot '%s')\n", dat, gp, gp);
    rc = 1;
  } else {
    snprintf(cmd, len + 32, "gnuplot '%s'", gp);
    int st = system(cmd);
    if (st == 0 && access(png_path, R_OK) == 0) rc = 0;
    else fprintf(stderr, "zgate bench: gnuplot failed on %s (exit status %d); the data is in %s\n", gp, st, dat);
  }
done:
  free(dat), free(gp), free(cmd);
  return rc;
}

#!/usr/bin/env perl
# clean-corpus.pl [-ratio R] [-max-word-length N] CORPUS L1 L2 OUT MIN MAX
#
# The parallel-corpus filter of Moses' scripts/training/clean-corpus-n.perl, written anew so
# that no mosesdecoder checkout is needed (prepare-iwslt14.sh uses it when MOSES_DIR is not
# set). Reads CORPUS.L1 and CORPUS.L2 line by line, and writes to OUT.L1 / OUT.L2 the pairs
# that pass, after the same normalisation: '|' removed, runs of white space squeezed to one
# space, leading and trailing space dropped. A pair is dropped when either side is empty, has
# fewer than MIN or more than MAX space-separated tokens, is more than R (default 9) times
# longer than the other side in tokens, or has a token of more than N (default 1000)
# characters.
use strict;
use warnings;

my $ratio = 9;
my $max_word_length = 1000;
while (@ARGV && $ARGV[0] =~ /^-/) {
  my $opt = shift @ARGV;
  if ($opt eq '-ratio') { $ratio = shift @ARGV; }
  elsif ($opt eq '-max-word-length') { $max_word_length = shift @ARGV; }
  else { die "clean-corpus.pl: unknown option $opt\n"; }
}
die "usage: clean-corpus.pl [-ratio R] [-max-word-length N] CORPUS L1 L2 OUT MIN MAX\n"
  unless @ARGV == 6;
my ($corpus, $l1, $l2, $out, $min, $max) = @ARGV;

open(my $in1, '<:encoding(UTF-8)', "$corpus.$l1") or die "cannot read $corpus.$l1: $!\n";
open(my $in2, '<:encoding(UTF-8)', "$corpus.$l2") or die "cannot read $corpus.$l2: $!\n";
open(my $out1, '>:encoding(UTF-8)', "$out.$l1") or die "cannot write $out.$l1: $!\n";
open(my $out2, '>:encoding(UTF-8)', "$out.$l2") or die "cannot write $out.$l2: $!\n";

sub normalise {
  my ($line) = @_;
  chomp $line;
  $line =~ s/\|//g;
  $line =~ s/\s+/ /g;
  $line =~ s/^ //;
  $line =~ s/ $//;
  return $line;
}

my ($read, $kept) = (0, 0);
my $too_long = $max_word_length + 1;
while (defined(my $f = <$in1>)) {
  my $e = <$in2>;
  die "$corpus.$l2 is shorter than $corpus.$l1\n" unless defined $e;
  $read++;
  $f = normalise($f);
  $e = normalise($e);
  next if $f eq '' || $e eq '';
  my @fw = split(/ /, $f);
  my @ew = split(/ /, $e);
  my ($fc, $ec) = (scalar @fw, scalar @ew);
  next if $fc > $max || $ec > $max || $fc < $min || $ec < $min;
  next if $ec / $fc > $ratio || $fc / $ec > $ratio;
  next if $f =~ /\S{$too_long}/ || $e =~ /\S{$too_long}/;
  print $out1 "$f\n";
  print $out2 "$e\n";
  $kept++;
}
die "$corpus.$l1 is shorter than $corpus.$l2\n" if defined <$in2>;
close($out1) or die "$!\n";
close($out2) or die "$!\n";
print STDERR "clean-corpus.pl: kept $kept of $read pairs\n";

# run from the checkout, with the virtual environment active
P="python tools/cpu_probe.py --platform 3.1 --sizes 1024,2048 --repeats 9"
S512="-D VW=16 -D MV=2 -D NR=14 -D KU=1 -D PACKB=1 -D KC=256 -D NB=1 -D ORDER=1"
D512="-D VW=8 -D MV=2 -D NR=14 -D KU=4 -D PACKB=0 -D KC=256 -D NB=8 -D ORDER=0"
S2="-D VW=8 -D MV=3 -D NR=4 -D KU=4 -D PACKB=1 -D KC=256 -D NB=8"
D2="-D VW=4 -D MV=2 -D NR=6 -D KU=4 -D PACKB=0 -D KC=256 -D NB=8"
echo "== avx512 s, numpy as configured"; $P --precision s $S512
echo "== avx512 s, numpy unhindered"; env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $P --precision s $S512
echo "== avx512 d, numpy as configured"; $P --precision d $D512
echo "== avx512 d, numpy unhindered"; env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $P --precision d $D512
export POCL_KERNELLIB_NAME=avx2
echo "== avx2 s, numpy as configured"; $P --precision s $S2
echo "== avx2 d, numpy as configured"; $P --precision d $D2
echo "== avx2 s, numpy unhindered"; env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $P --precision s $S2
echo "== avx2 d, numpy unhindered"; env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $P --precision d $D2
